// Command degrader watches every tool's health, publishes tool.degraded,
// tool.quarantined and tool.recovered, and delivers them to the configured
// webhooks. Configuration: AGENTQ_* (docs/operations.md).
package main

import (
	"os"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/health"
	"github.com/agentq/agentq/internal/webhook"
)

func main() { os.Exit(app.Main("degrader", health.Consumer, webhook.Consumer)) }
