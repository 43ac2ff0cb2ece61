package cli_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/testenv"
)

// readmeCommands returns the commands of the README section under
// heading: every line of its sh blocks, continued lines joined.
func readmeCommands(t *testing.T, heading string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	text := string(raw)
	start := strings.Index(text, "\n"+heading+"\n")
	require.NotEqual(t, -1, start, "README has %q", heading)
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
	return cmds
}

// The README's experiment walk-through runs as written: the test model
// started by its command (on a free port), agentq dev with the settings
// its make dev line gives (in this process, on the test database), then
// every other command through bash and the bin/agentq a build makes, on a
// tenant of the test's own.
func TestReadmeExperimentRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds agentq and runs the README's commands")
	}
	cmds := readmeCommands(t, "## Run a prompt experiment")
	require.GreaterOrEqual(t, len(cmds), 6, "the README's commands: %v", cmds)
	dir := readmeDir(t)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String() // a free port for the test model
	require.NoError(t, ln.Close())
	free := func(c string) string { return strings.ReplaceAll(c, "127.0.0.1:8090", addr) }

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tenant := testenv.Tenant(t)
	var client map[string]string
	environ := func() []string {
		return append(os.Environ(), "AGENTQ_NATS_URL="+client["AGENTQ_NATS_URL"], "AGENTQ_DATABASE_URL="+testenv.DatabaseURL(t),
			"AGENTQ_LOG_LEVEL=warn", "XDG_CACHE_HOME="+t.TempDir())
	}
	ran := map[string]bool{}
	for _, c := range cmds {
		c = free(c)
		words := strings.Fields(c)
		switch {
		case strings.HasPrefix(c, "bin/agentq testmodel"):
			// It runs until interrupted: started, and stopped with the test.
			cmd := exec.CommandContext(ctx, "bash", "-c", "exec "+c)
			cmd.Dir = dir
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { cancel(); _ = cmd.Wait() })
			line, err := bufio.NewReader(out).ReadString('\n')
			require.NoError(t, err)
			require.Contains(t, line, "test model serving at http://"+addr+"/v1 (latency 100ms)")
			ran["testmodel"] = true
		case strings.HasSuffix(c, "make dev"):
			// The settings before make dev, for agentq dev on the test
			// database.
			env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn"}
			for _, w := range words[:len(words)-2] {
				k, v, ok := strings.Cut(w, "=")
				require.True(t, ok, "a setting before make dev: %s", c)
				env[k] = v
			}
			require.Equal(t, "http://"+addr+"/v1", env["AGENTQ_LLM_BASE_URL"])
			natsURL, stop := startDev(t, ctx, env)
			t.Cleanup(stop)
			client = map[string]string{"AGENTQ_NATS_URL": natsURL}
			ran["dev"] = true
		default:
			require.True(t, ran["dev"], "a command before make dev: %s", c)
			require.Equal(t, "bin/agentq", words[0], "a command the README does not explain: %s", c)
			c = strings.ReplaceAll(c, "--tenant demo", "--tenant "+tenant)
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
			cmd := exec.CommandContext(cctx, "bash", "-c", c)
			cmd.Dir, cmd.Env = dir, environ()
			out, err := cmd.CombinedOutput()
			ccancel()
			require.NoError(t, err, "%s\n%s", c, out)
			switch words[2] {
			case "run":
				require.Contains(t, string(out), "recommendation: version 2, confidence HIGH")
			case "trials":
				require.Contains(t, string(out), "FAIL")
			case "activate":
				require.Contains(t, string(out), "billing-answer@2 is now production")
			case "get":
				require.Contains(t, string(out), "billing-answer@2")
			}
			ran[words[2]] = true
		}
	}
	for _, want := range []string{"testmodel", "dev", "run", "trials", "activate", "get"} {
		require.True(t, ran[want], "the walk-through runs %s", want)
	}
}
