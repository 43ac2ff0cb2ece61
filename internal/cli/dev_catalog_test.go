package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/testenv"
)

// The indexer issue's "done when": with agentq dev running, the README's
// "Try it" commands for the catalogue, as written, with nothing but the
// state file to find the instance: seed the example prompts and tools,
// search, get with parameters, activate, search tools.
func TestDevTryItCatalog(t *testing.T) {
	cache := t.TempDir()
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off",
		"AGENTQ_LOG_LEVEL": "warn", "XDG_CACHE_HOME": cache}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, stop := startDev(t, ctx, env)
	defer stop()
	// No AGENTQ_NATS_URL: the commands read agentq dev's state file.
	client := map[string]string{"XDG_CACHE_HOME": cache}
	tenant := testenv.Tenant(t)

	steps := []struct {
		args []string
		want []string // regular expressions, each matching a line of stdout
	}{
		{[]string{"prompt", "seed", examplePrompts, "--tenant", tenant},
			[]string{`^6 prompts for tenant ` + tenant + `: 6 created, 0 unchanged, 0 rejected, 0 without an answer$`}},
		{[]string{"tool", "register", exampleTools, "--tenant", tenant},
			[]string{`^10 tools for tenant ` + tenant + `: 10 created, 0 unchanged, 0 rejected, 0 without an answer$`}},
		{[]string{"prompt", "search", "fix a failing SQL query", "--tenant", tenant},
			[]string{`^retrieval: hybrid$`, `^1\s+sql-repair@1\s+repair\s`}},
		{[]string{"prompt", "get", "sql-repair", "--tenant", tenant, "--param", "Query=select * from orders where", "--param", "Error=syntax error at end of input"},
			[]string{`^sql-repair@1  Repair a failing SQL query$`, `^--- rendered ---$`, `^select \* from orders where$`, `^syntax error at end of input$`}},
		{[]string{"prompt", "activate", "sql-repair", "1", "--tenant", tenant},
			[]string{`^sql-repair@1 is now production for tenant ` + tenant + ` \(labels on this version: .*production.*\)$`}},
		{[]string{"tool", "search", "send an email to a customer", "--tenant", tenant},
			[]string{`^retrieval: hybrid$`, `^1\s+send_email\s+mail\s`}},
	}
	for _, s := range steps {
		code, out, errOut := run(ctx, client, "", s.args...)
		require.Equal(t, 0, code, "agentq %s: %s%s", strings.Join(s.args, " "), out, errOut)
		for _, re := range s.want {
			require.Regexp(t, "(?m)"+re, out, "agentq %s", strings.Join(s.args, " "))
		}
	}
}
