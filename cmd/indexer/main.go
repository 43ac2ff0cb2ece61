// Command indexer keeps the prompt library and the tool registry from the
// stream, embeds and indexes them, publishes prompt.indexed, tool.indexed
// and indexer.rejected, and serves search.prompts, search.tools and
// prompts.get over NATS. Configuration: AGENTQ_* (docs/operations.md).
package main

import (
	"os"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/indexer"
)

func main() { os.Exit(app.Main("indexer", indexer.Consumer)) }
