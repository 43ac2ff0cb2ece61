// Command scorer keeps rolling quality for every tool and prompt version and
// publishes quality.changed. Configuration: AGENTQ_* (docs/operations.md).
package main

import (
	"os"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/quality"
)

func main() { os.Exit(app.Main("scorer", quality.Consumer)) }
