package cli_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/testenv"
)

// The README's "Try it" runs as written: every command of its code blocks,
// in order, through bash and the bin/agentq a build makes, against a
// running agentq dev (its tenant "demo" made the test's own, since the
// test database may be shared).
func TestReadmeTryItRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds agentq and runs the README's commands")
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	text := string(raw)
	start := strings.Index(text, "\n## Try it\n")
	require.NotEqual(t, -1, start)
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var cmds []string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		for _, line := range strings.Split(strings.ReplaceAll(block[1], "\\\n", " "), "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
				cmds = append(cmds, line)
			}
		}
	}
	require.GreaterOrEqual(t, len(cmds), 10, "the README's commands: %v", cmds)

	dir := readmeDir(t)

	// The ingest endpoint's token is the test tenant's, in a file of its
	// own: the dev token is for demo.
	tenant := testenv.Tenant(t)
	token, line, err := auth.New(tenant)
	require.NoError(t, err)
	tokens, tokenFile := filepath.Join(dir, "tokens"), filepath.Join(dir, "dev-token")
	require.NoError(t, os.WriteFile(tokens, []byte(line+"\n"), 0o600))
	require.NoError(t, os.WriteFile(tokenFile, []byte(token+"\n"), 0o600))
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn", "AGENTQ_TOKEN_FILE": tokens}
	ctx, cancel := context.WithCancel(context.Background())
	natsURL, banner, stop := startDevBanner(t, ctx, env)
	t.Cleanup(func() { stop(); cancel() })
	m := regexp.MustCompile(`ingest     (http://[0-9.:]+)/events`).FindStringSubmatch(banner)
	require.NotNil(t, m, banner)
	ingestBase := m[1]

	environ := append(os.Environ(), "AGENTQ_NATS_URL="+natsURL, "AGENTQ_DATABASE_URL="+env["AGENTQ_DATABASE_URL"],
		"AGENTQ_LOG_LEVEL=warn", "XDG_CACHE_HOME="+t.TempDir())
	for _, c := range cmds {
		c = strings.ReplaceAll(c, "--tenant demo", "--tenant "+tenant)
		c = regexp.MustCompile(`\.demo\b`).ReplaceAllString(c, "."+tenant)
		c = strings.ReplaceAll(c, "~/.cache/agentq/dev-token", tokenFile)
		c = strings.ReplaceAll(c, "http://127.0.0.1:8088", ingestBase)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		cmd := exec.CommandContext(cctx, "bash", "-c", c)
		cmd.Dir, cmd.Env = dir, environ
		out, err := cmd.CombinedOutput()
		cancel()
		require.NoError(t, err, "%s\n%s", c, out)
		switch {
		case strings.Contains(c, "alerts"):
			require.Contains(t, string(out), "currency_convert warning → degraded")
			require.Contains(t, string(out), "degraded → quarantined")
		case strings.Contains(c, " tail "):
			require.Contains(t, string(out), "agentq.tool.rated.v1 tenant="+tenant)
			require.Contains(t, string(out), "agentq.quality.changed.v1 tenant="+tenant)
		case strings.Contains(c, "tool health"):
			require.Regexp(t, `currency_convert\s+quarantined`, string(out))
		case strings.Contains(c, "tool release"):
			require.Contains(t, string(out), "is on probation")
		case strings.Contains(c, "prompt search"):
			require.Contains(t, string(out), "sql-repair")
		case strings.HasPrefix(c, "curl "):
			require.Contains(t, string(out), `"status":"accepted"`)
			id := regexp.MustCompile(`"id":"([^"]+)"`).FindStringSubmatch(c)[1]
			data := waitQualityChanged(t, ctx, natsURL, tenant, id)
			require.EqualValues(t, 1, data["total_calls"], "the scorer counted the event sent over HTTP")
		}
	}
}

// readmeDir returns a directory laid out as the repository's root for the
// README's commands: bin/agentq, built from this tree, and examples/.
func readmeDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "bin", "agentq"), "./cmd/agentq")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.NoError(t, os.Symlink(filepath.Join(root, "examples"), filepath.Join(dir, "examples")))
	return dir
}
