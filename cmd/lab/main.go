// Command lab runs agentq's prompt experiments: it accepts
// experiment.requested (or refuses it with lab.rejected), runs every trial
// against the model at AGENTQ_LLM_BASE_URL, evaluates it through the
// structural, rules and LLM-judge tiers, and publishes experiment.started,
// experiment.completed or experiment.failed. With no model configured it
// refuses every experiment. Configuration: AGENTQ_* (see README and
// docs/lab.md).
package main

import (
	"os"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/lab"
)

func main() { os.Exit(app.Main("lab", lab.Consumer)) }
