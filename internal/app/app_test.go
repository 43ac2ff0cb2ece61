package app_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/app"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/cli"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

// The test binary doubles as a consumer binary: with AGENTQ_TEST_MAIN set it
// runs app.Main exactly as cmd/scorer does.
func TestMain(m *testing.M) {
	if os.Getenv("AGENTQ_TEST_MAIN") == "scorer" {
		os.Exit(app.Main("scorer", quality.Consumer))
	}
	testenv.Main(m)
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// mainProcess starts the scorer binary with env on top of a clean AGENTQ_*
// environment.
func mainProcess(t *testing.T, env ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENTQ_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "AGENTQ_TEST_MAIN=scorer")
	cmd.Env = append(cmd.Env, env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, &stderr
}

func TestScorerBinaryServesAndStopsOnSIGTERM(t *testing.T) {
	n := testenv.StartNATS(t)
	metrics := freeAddr(t)
	cmd, stderr := mainProcess(t,
		"AGENTQ_NATS_URL="+n.URL, "AGENTQ_DATABASE_URL="+testenv.DatabaseURL(t),
		"AGENTQ_METRICS_ADDR="+metrics, "AGENTQ_SHUTDOWN_GRACE=3s", "AGENTQ_LOG_FORMAT=json")

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + metrics + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testenv.Eventually(t, 60*time.Second, func() bool { code, _ := get("/healthz"); return code == http.StatusOK },
		"/healthz never became ready; stderr:\n%s", stderr)

	tenant := testenv.Tenant(t)
	sub, err := n.NC.SubscribeSync("quality.changed." + tenant)
	require.NoError(t, err)
	reg, err := schemas.Load()
	require.NoError(t, err)
	ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "search", "success": true})
	require.NoError(t, err)
	_, err = bus.NewPublisher(n.JS, reg).Publish(context.Background(), ev)
	require.NoError(t, err)
	msg, err := sub.NextMsg(30 * time.Second)
	require.NoError(t, err, "the scorer process published quality.changed")
	require.Equal(t, ev.ID(), msg.Header.Get("ce-causationid"))

	// The result is published after commit, the input acked just after.
	var body string
	testenv.Eventually(t, 10*time.Second, func() bool {
		_, body = get("/metrics")
		return strings.Contains(body, `agentq_events_acked_total{consumer="scorer"} 1`)
	}, "the event is acked and counted")
	require.Contains(t, body, `agentq_events_dead_lettered_total{consumer="scorer",reason="schema"} 0`)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit status 0 after SIGTERM; stderr:\n%s", stderr)
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30s of SIGTERM (grace 3s); stderr:\n%s", stderr)
	}
	require.Contains(t, stderr.String(), `"message":"stopped"`)
}

func TestScorerBinaryStartupErrors(t *testing.T) {
	tests := []struct {
		name string
		env  []string
		code int
		want string
	}{
		{"bad configuration", []string{"AGENTQ_BATCH_SIZE=lots"}, 2, "AGENTQ_BATCH_SIZE"},
		{"no database", []string{"AGENTQ_NATS_URL=nats://127.0.0.1:1"}, 1, "AGENTQ_DATABASE_URL is not set"},
		{"nats unreachable", []string{"AGENTQ_NATS_URL=nats://" + freeAddr(t), "AGENTQ_DATABASE_URL=postgres://x@127.0.0.1:1/x"}, 1, "connect to NATS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd, stderr := mainProcess(t, append(tc.env, "AGENTQ_METRICS_ADDR=")...)
			err := cmd.Wait()
			var exit *exec.ExitError
			require.True(t, errors.As(err, &exit), "exits with an error: %v", err)
			require.Equal(t, tc.code, exit.ExitCode(), fmt.Sprint(stderr))
			require.Contains(t, stderr.String(), tc.want)
		})
	}
}

// agentq healthcheck, as a container healthcheck runs it, passes against a
// healthy binary and fails once it has stopped.
func TestHealthcheckCommand(t *testing.T) {
	n := testenv.StartNATS(t)
	metrics := freeAddr(t)
	cmd, stderr := mainProcess(t, "AGENTQ_NATS_URL="+n.URL, "AGENTQ_DATABASE_URL="+testenv.DatabaseURL(t),
		"AGENTQ_METRICS_ADDR="+metrics, "AGENTQ_SHUTDOWN_GRACE=3s")
	check := func() (int, string) {
		var out, errOut bytes.Buffer
		code := cli.Run(context.Background(), cli.Env{
			Args: []string{"healthcheck"}, Getenv: func(k string) string {
				if k == "AGENTQ_METRICS_ADDR" {
					return metrics
				}
				return ""
			}, Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
		})
		return code, out.String() + errOut.String()
	}
	testenv.Eventually(t, 60*time.Second, func() bool { code, _ := check(); return code == 0 },
		"agentq healthcheck never passed; stderr:\n%s", stderr)
	_, out := check()
	require.Contains(t, out, "ok")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	_ = cmd.Wait()
	code, out := check()
	require.Equal(t, 1, code)
	require.Contains(t, out, "unhealthy")
}
