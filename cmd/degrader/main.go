// Command degrader watches every tool's health and publishes tool.degraded,
// tool.quarantined and tool.recovered. Configuration: AGENTQ_* (see README).
package main

import (
	"os"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/health"
)

func main() { os.Exit(app.Main("degrader", health.Consumer)) }
