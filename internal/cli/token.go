package cli

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/config"
)

func init() {
	register("token", "make a bearer token for a tenant (the HTTP ways in: MCP over HTTP, ingest)", runToken)
	describe("token", "new --tenant T [--operator]", `Prints a new random token and the line that grants it to tenant T in the
token file (AGENTQ_TOKEN_FILE). The line holds the token's SHA-256, not the
token: append it to the file, hand the token to the agent, and keep no other
copy. Servers reading the file pick up added and removed lines within
seconds, without a restart.

A token may send every input event of its tenant but the operator commands
(tool.released, prompt.activated, experiment.cancelled), which the ingest
endpoint refuses from it (403, reason forbidden). --operator makes a token
that may send those too: its line ends with the scope operator.`)
}

func runToken(_ context.Context, e Env, _ config.Config, _ zerolog.Logger, args []string) error {
	if len(args) == 0 || args[0] != "new" {
		fmt.Fprintln(e.Stderr, "agentq token: want the subcommand new (agentq token new --tenant T)")
		return errUsage
	}
	fs := flags("token", e)
	tenant := fs.String("tenant", "", "tenant the token grants (required)")
	operator := fs.Bool("operator", false, "the token may send operator commands too (tool.released, prompt.activated, experiment.cancelled)")
	if err := fs.Parse(args[1:]); err != nil {
		return parseError(err)
	}
	if *tenant == "" || fs.NArg() > 0 {
		fmt.Fprintln(e.Stderr, "agentq token new: want --tenant T, optionally --operator, and nothing else")
		return errUsage
	}
	scope := auth.ScopeAgent
	if *operator {
		scope = auth.ScopeOperator
	}
	tok, line, err := auth.NewScoped(*tenant, scope)
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stdout, "token: %s\nline for the token file: %s\n", tok, line)
	return nil
}
