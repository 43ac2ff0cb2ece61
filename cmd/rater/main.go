// Command rater rates the output of tool calls and prompt uses and
// publishes tool.rated and prompt.rated: with the LLM at
// AGENTQ_LLM_BASE_URL, or with the built-in rules (rules:v1) when none is
// configured. Configuration: AGENTQ_* (docs/operations.md).
package main

import (
	"os"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/rating"
)

func main() { os.Exit(app.Main("rater", rating.Consumer)) }
