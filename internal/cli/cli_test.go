package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/cli"
	"github.com/agentq/agentq/internal/quality"
	"github.com/agentq/agentq/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func run(ctx context.Context, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errOut syncBuffer
	code = cli.Run(ctx, cli.Env{
		Args: args, Getenv: func(k string) string { return env[k] },
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
	})
	return code, out.String(), errOut.String()
}

// The "done when": agentq dev plus a published tool.executed event
// produces a quality.changed event that a subscriber can see.
func TestDevPublishTail(t *testing.T) {
	ctx, env, natsURL, client := devOnTestDatabase(t)

	tailDone := make(chan string, 1)
	go func() {
		tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
		defer tcancel()
		_, out, _ := run(tctx, client, "", "tail", "--count", "1", "quality.changed.demo")
		tailDone <- out
	}()
	time.Sleep(500 * time.Millisecond) // let tail subscribe; it only shows new events

	code, out, errOut := run(ctx, client, "", "publish", "--tenant", "demo", "--type", "tool.executed",
		"--data", `{"tool_name":"web_search","success":true,"latency_ms":120}`)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "published agentq.tool.executed.v1")
	id := regexp.MustCompile(`id=(\S+)`).FindStringSubmatch(out)[1]

	select {
	case got := <-tailDone:
		require.Contains(t, got, "agentq.quality.changed.v1 tenant=demo")
		require.Contains(t, got, "cause="+id)
		require.Contains(t, got, `"total_calls":1`)
		require.Contains(t, got, `"tool_name":"web_search"`)
	case <-time.After(60 * time.Second):
		t.Fatal("no quality.changed seen by tail")
	}

	// Data on stdin, and an invalid event refused before it is sent.
	code, _, errOut = run(ctx, client, `{"tool_name":"x","success":"yes"}`, "publish", "--tenant", "demo", "--type", "tool.executed")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "/success: got string, want boolean")
	code, out, _ = run(ctx, client, "", "dlq")
	require.Equal(t, 0, code)
	require.Contains(t, out, "no dead letters")

	// Replay one tenant while the scorer runs: its state is deleted, the
	// scorer recreates its consumer from the first sequence and rebuilds
	// exactly the same state.
	pool := testenv.Pool(t)
	tenant := testenv.Tenant(t)
	for i := range 30 {
		code, _, errOut := run(ctx, client, "", "publish", "--tenant", tenant, "--type", "tool.executed",
			"--data", fmt.Sprintf(`{"tool_name":"t%d","success":%v,"latency_ms":%d}`, i%3, i%4 != 0, i))
		require.Equal(t, 0, code, errOut)
	}
	var before []*quality.Metrics
	testenv.Eventually(t, 30*time.Second, func() bool {
		before, _ = quality.List(ctx, pool, tenant, "", "")
		var n int64
		for _, m := range before {
			n += m.TotalCalls
		}
		return n == 30
	}, "30 calls scored")
	replayAt := time.Now()
	code, out, errOut = run(ctx, map[string]string{"AGENTQ_NATS_URL": natsURL, "AGENTQ_DATABASE_URL": env["AGENTQ_DATABASE_URL"]},
		"", "replay", "--consumer", "scorer", "--tenant", tenant, "--yes")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "scorer reset for tenant "+tenant)
	testenv.Eventually(t, 60*time.Second, func() bool {
		after, err := quality.List(ctx, pool, tenant, "", "")
		if err != nil || len(after) != len(before) {
			return false
		}
		for i := range after {
			if !sameChanged(after[i], before[i]) {
				return false
			}
		}
		return true
	}, "the running scorer rebuilt the tenant's state")
	var oldest time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(processed_at) FROM inbox WHERE consumer = 'scorer' AND tenant_id = $1`, tenant).Scan(&oldest))
	require.True(t, oldest.After(replayAt.Add(-time.Second)), "every event was applied again after the replay (oldest inbox row %s, replay at %s)", oldest, replayAt)
}

func sameChanged(a, b *quality.Metrics) bool {
	x, y := a.Changed(), b.Changed()
	return x.TotalCalls == y.TotalCalls && x.Successes == y.Successes && x.QualityScore == y.QualityScore &&
		x.ConsecutiveFailures == y.ConsecutiveFailures && x.RecentScore == y.RecentScore && *x.AvgLatencyMs == *y.AvgLatencyMs
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: agentq <command>"},
		{[]string{"help"}, 0, "commands:"},
		{[]string{"nope"}, 2, `unknown command "nope"`},
		{[]string{"dlq", "-h"}, 0, "-redrive"},
		{[]string{"tail", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"publish"}, 2, "-tenant"},
		{[]string{"replay", "--consumer", "scorer"}, 2, "--yes"},
		{[]string{"migrate"}, 1, "AGENTQ_DATABASE_URL is not set"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := run(context.Background(), nil, "", tc.args...)
			require.Equal(t, tc.code, code)
			require.Contains(t, out+errOut, tc.want)
		})
	}
}

func TestBadConfigurationExits2(t *testing.T) {
	code, _, errOut := run(context.Background(), map[string]string{"AGENTQ_BATCH_SIZE": "lots"}, "", "dlq")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "AGENTQ_BATCH_SIZE")
}

// The load generator runs end to end and reports positive, consistent rates.
func TestBenchSmoke(t *testing.T) {
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t)}
	code, out, errOut := run(context.Background(), env, "", "bench", "--events", "300", "--rounds", "1", "--light", "3", "--batch", "100")
	require.Equal(t, 0, code, errOut)
	for _, want := range []string{"raw JetStream consume + ack", "scorer consume → commit → ack", "scorer / raw", "light traffic"} {
		require.Contains(t, out, want)
	}
	require.NotRegexp(t, `\s0 events/s`, out)
}

// agentq dev --data DIR keeps NATS and the dev database under DIR: after a
// restart the stream still holds the events and the scorer's metrics go on
// from where they were.
func TestDevDataSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the dev database twice")
	}
	dir := t.TempDir()
	// No AGENTQ_DATABASE_URL: agentq dev starts its own PGlite under dir.
	env := map[string]string{"AGENTQ_METRICS_ADDR": "", "AGENTQ_LOG_LEVEL": "warn", "AGENTQ_PGLITE_DIR": os.Getenv("AGENTQ_PGLITE_DIR")}
	publishAndSee := func(wantCalls int) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		natsURL, stop := startDev(t, ctx, env, "--data", dir)
		defer stop()
		client := map[string]string{"AGENTQ_NATS_URL": natsURL}
		code, out, errOut := run(ctx, client, "", "publish", "--tenant", "keep", "--type", "tool.executed",
			"--data", `{"tool_name":"web_search","success":true}`)
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, fmt.Sprintf("seq=%d", 2*wantCalls-1), "the stream kept the earlier events (each call adds one quality.changed)")
		tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
		defer tcancel()
		code, out, errOut = run(tctx, client, "", "tail", "--all", "--count", fmt.Sprint(wantCalls), "quality.changed.keep")
		require.Equal(t, 0, code, errOut)
		require.Contains(t, out, fmt.Sprintf(`"total_calls":%d`, wantCalls), "the metrics kept counting across the restart")
	}
	publishAndSee(1)
	publishAndSee(2)
	require.DirExists(t, filepath.Join(dir, "nats"))
	require.DirExists(t, filepath.Join(dir, "pglite"))
}

// devOnTestDatabase runs agentq dev on the test database for the rest of
// the test and returns its environment, NATS URL and a client environment.
func devOnTestDatabase(t *testing.T) (ctx context.Context, env map[string]string, natsURL string, client map[string]string) {
	t.Helper()
	env = map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "", "AGENTQ_LOG_LEVEL": "warn"}
	ctx, cancel := context.WithCancel(context.Background())
	natsURL, stop := startDev(t, ctx, env)
	t.Cleanup(func() { stop(); cancel() })
	return ctx, env, natsURL, map[string]string{"AGENTQ_NATS_URL": natsURL}
}

// startDev runs agentq dev until stop is called and returns its NATS URL.
func startDev(t *testing.T, ctx context.Context, env map[string]string, args ...string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, cli.Env{
			Args: append([]string{"dev", "--nats-listen", "127.0.0.1:0"}, args...), Getenv: func(k string) string { return env[k] },
			Stdin: strings.NewReader(""), Stdout: pw, Stderr: io.Discard,
		})
		pw.Close()
	}()
	re := regexp.MustCompile(`NATS\s+(nats://\S+)`)
	sc := bufio.NewScanner(pr)
	natsURL := ""
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			natsURL = m[1]
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	require.NotEmpty(t, natsURL, "agentq dev prints how to connect")
	return natsURL, func() {
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code)
		case <-time.After(30 * time.Second):
			t.Error("agentq dev did not stop")
		}
	}
}

// A dead letter redriven after a fix reaches the consumer again and is
// applied once; the DLQ no longer holds it.
func TestDLQRedrive(t *testing.T) {
	ctx, _, natsURL, client := devOnTestDatabase(t)
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)

	// A valid event the scorer dead-lettered while it had a bug, as the
	// runner stores it: original headers and data plus the reason.
	tenant := testenv.Tenant(t)
	ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "search", "success": true})
	require.NoError(t, err)
	orig, err := bus.Encode(ev)
	require.NoError(t, err)
	dl := nats.NewMsg(bus.DLQSubject("scorer", orig.Subject))
	for k, v := range orig.Header {
		dl.Header[k] = v
	}
	dl.Header.Set(bus.HeaderDLQReason, "failed 5 deliveries, last error: bug")
	dl.Header.Set(bus.HeaderDLQReasonCode, bus.ReasonMaxDeliver)
	dl.Header.Set(bus.HeaderDLQConsumer, "scorer")
	dl.Header.Set(bus.HeaderDLQSubject, orig.Subject)
	dl.Data = orig.Data
	_, err = js.PublishMsg(ctx, dl)
	require.NoError(t, err)

	code, out, _ := run(ctx, client, "", "dlq", "--reason", "schema")
	require.Equal(t, 0, code)
	require.Contains(t, out, "no dead letters match")
	code, out, _ = run(ctx, client, "", "dlq", "--consumer", "scorer")
	require.Equal(t, 0, code)
	require.Contains(t, out, "reason=max_deliver deliveries=0: failed 5 deliveries, last error: bug")

	code, out, errOut := run(ctx, client, "", "dlq", "--redrive", "--consumer", "scorer", "--reason", "max_deliver")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "1 dead letters redriven")

	pool := testenv.Pool(t)
	testenv.Eventually(t, 30*time.Second, func() bool {
		m, err := quality.Get(ctx, pool, quality.Key{Tenant: tenant, Target: quality.TargetTool, ID: "search"})
		return err == nil && m != nil && m.TotalCalls == 1
	}, "the redriven event was scored")
	code, out, _ = run(ctx, client, "", "dlq")
	require.Equal(t, 0, code)
	require.Contains(t, out, "no dead letters")
}
