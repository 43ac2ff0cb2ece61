package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/auth"
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

// noDevState is a cache directory that does not exist: a command run by
// the tests never finds the state file of a developer's own agentq dev
// unless the test gives it XDG_CACHE_HOME.
var noDevState = filepath.Join(os.TempDir(), "agentq-cli-test-no-such-cache")

// getenv reads env, with XDG_CACHE_HOME defaulting to cache.
func getenv(env map[string]string, cache string) func(string) string {
	return func(k string) string {
		if v, ok := env[k]; ok {
			return v
		}
		switch k {
		case "XDG_CACHE_HOME":
			return cache
		case "AGENTQ_INGEST_ADDR":
			return "127.0.0.1:0" // agentq devs of parallel tests must not share a port
		}
		return ""
	}
}

// runAsync runs a command in the background: its stdout arrives on the
// channel when it ends; stderr can be read while it runs.
func runAsync(ctx context.Context, env map[string]string, args ...string) (<-chan string, *syncBuffer) {
	var out, errOut syncBuffer
	done := make(chan string, 1)
	go func() {
		cli.Run(ctx, cli.Env{Args: args, Getenv: getenv(env, noDevState), Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut})
		done <- out.String()
	}()
	return done, &errOut
}

func run(ctx context.Context, env map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	var out, errOut syncBuffer
	code = cli.Run(ctx, cli.Env{
		Args: args, Getenv: getenv(env, noDevState),
		Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errOut,
	})
	return code, out.String(), errOut.String()
}

// The "done when": agentq dev plus a published tool.executed event
// produces a quality.changed event that a subscriber can see.
func TestDevPublishTail(t *testing.T) {
	ctx, env, natsURL, client := devOnTestDatabase(t)

	// The README's example, on a tenant of the test's own (the database may
	// outlive the test): the call, the rules rater's tool.rated, and the
	// two quality.changed the scorer publishes for them.
	demo := testenv.Tenant(t)
	tctx, tcancel := context.WithTimeout(ctx, 60*time.Second)
	defer tcancel()
	tailDone, tailErr := runAsync(tctx, client, "tail", "--count", "3", "quality.changed."+demo, "tool.rated."+demo)
	// tail shows only events published after its consumer exists, which
	// it says on stderr.
	testenv.Eventually(t, 30*time.Second, func() bool { return strings.Contains(tailErr.String(), "tailing ") }, "tail did not say it had subscribed")

	code, out, errOut := run(ctx, client, "", "publish", "--tenant", demo, "--type", "tool.executed",
		"--data", `{"tool_name":"web_search","success":true,"latency_ms":120,"input":{"query":"weather in Paris"},"output":"Paris: 21°C, sunny"}`)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "published agentq.tool.executed.v1")
	id := regexp.MustCompile(`id=(\S+)`).FindStringSubmatch(out)[1]

	select {
	case got := <-tailDone:
		require.Contains(t, got, "agentq.quality.changed.v1 tenant="+demo)
		require.Contains(t, got, "agentq.tool.rated.v1 tenant="+demo)
		require.Contains(t, got, "cause="+id, "the rating and the first quality.changed are caused by the call")
		require.Contains(t, got, `"rater":"rules:v1"`)
		require.Contains(t, got, `"rater_kind":"rules"`)
		require.Contains(t, got, `"total_calls":1`)
		require.Contains(t, got, `"rating_count":1`, "the scorer folded the rating")
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
	// The rater (rules) rates the 8 failed calls; the scorer folds those too.
	testenv.Eventually(t, 30*time.Second, func() bool {
		before, _ = quality.List(ctx, pool, tenant, "", "")
		var n, r int64
		for _, m := range before {
			n += m.TotalCalls
			r += m.RatingCount
		}
		return n == 30 && r == 8
	}, "30 calls and 8 ratings scored")
	replayAt := time.Now()
	code, out, errOut = run(ctx, map[string]string{"AGENTQ_NATS_URL": natsURL, "AGENTQ_DATABASE_URL": env["AGENTQ_DATABASE_URL"]},
		"", "replay", "--consumer", "scorer", "--tenant", tenant, "--yes")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "scorer rebuilt for tenant "+tenant+": 38 events", "30 calls and the rater's 8 ratings")
	require.Contains(t, out, "nothing published")
	after, err := quality.List(ctx, pool, tenant, "", "")
	require.NoError(t, err)
	require.Equal(t, before, after, "the rebuild gives exactly the state live processing gave, every field")
	var oldest time.Time
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(processed_at) FROM inbox WHERE consumer = 'scorer' AND tenant_id = $1`, tenant).Scan(&oldest))
	require.True(t, oldest.After(replayAt.Add(-time.Second)), "every event was applied again after the replay (oldest inbox row %s, replay at %s)", oldest, replayAt)
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
		{[]string{"replay", "--consumer", "rater", "--yes"}, 2, "rebuilding the rater re-rates every event with the rules"},
		{[]string{"replay", "--consumer", "webhook", "--yes"}, 2, `cannot rebuild "webhook"`},
		{[]string{"alerts", "--tenant", "Bad!"}, 2, `tenant "Bad!" does not match`},
		{[]string{"alerts", "extra"}, 2, "unexpected arguments"},
		{[]string{"migrate"}, 1, "AGENTQ_DATABASE_URL is not set"},
		{[]string{"token"}, 2, "want the subcommand new"},
		{[]string{"token", "new"}, 2, "want --tenant T"},
		{[]string{"token", "new", "--tenant", "a b"}, 1, `"a b" is not a valid tenant`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := run(context.Background(), nil, "", tc.args...)
			require.Equal(t, tc.code, code)
			require.Contains(t, out+errOut, tc.want)
		})
	}
}

func TestTokenNewGrantsTheTenant(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		scope auth.Scope
	}{
		{nil, auth.ScopeAgent},
		{[]string{"--operator"}, auth.ScopeOperator},
	} {
		code, out, errOut := run(context.Background(), nil, "", append([]string{"token", "new", "--tenant", "acme"}, tc.flags...)...)
		require.Equal(t, 0, code, errOut)
		tok, line, ok := strings.Cut(strings.TrimPrefix(out, "token: "), "\nline for the token file: ")
		require.True(t, ok, out)
		toks, err := auth.Parse(strings.NewReader(line))
		require.NoError(t, err)
		g, err := toks.Grant(tok)
		require.NoError(t, err)
		require.Equal(t, auth.Grant{Tenant: "acme", Scope: tc.scope}, g)
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
	env := map[string]string{"AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn", "AGENTQ_PGLITE_DIR": os.Getenv("AGENTQ_PGLITE_DIR")}
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
	env = map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn"}
	ctx, cancel := context.WithCancel(context.Background())
	natsURL, stop := startDev(t, ctx, env)
	t.Cleanup(func() { stop(); cancel() })
	return ctx, env, natsURL, map[string]string{"AGENTQ_NATS_URL": natsURL}
}

// startDev runs agentq dev until stop is called and returns its NATS URL.
func startDev(t *testing.T, ctx context.Context, env map[string]string, args ...string) (string, func()) {
	t.Helper()
	natsURL, _, stop := startDevBanner(t, ctx, env, args...)
	return natsURL, stop
}

// startDevBanner runs agentq dev until stop is called and returns its NATS
// URL and banner. Its state file goes to env's XDG_CACHE_HOME, or to a
// directory of the test's own.
func startDevBanner(t *testing.T, ctx context.Context, env map[string]string, args ...string) (natsURL, banner string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var errOut syncBuffer
	go func() {
		done <- cli.Run(ctx, cli.Env{
			Args: append([]string{"dev", "--nats-listen", "127.0.0.1:0"}, args...), Getenv: getenv(env, t.TempDir()),
			Stdin: strings.NewReader(""), Stdout: pw, Stderr: &errOut,
		})
		pw.Close()
	}()
	re := regexp.MustCompile(`NATS\s+(nats://\S+)`)
	sc := bufio.NewScanner(pr)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if m := re.FindStringSubmatch(sc.Text()); m != nil && natsURL == "" {
			natsURL = m[1]
		}
		if strings.Contains(sc.Text(), "go run ./cmd/agentq publish") { // the banner's last line
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	require.NotEmpty(t, natsURL, "agentq dev prints how to connect; it said: %s", errOut.String())
	return natsURL, strings.Join(lines, "\n"), func() {
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code, errOut.String())
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
	ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": "search", "success": true, "output": "3 results"})
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

	// The redrive is for the scorer alone: the rater, which handles
	// tool.executed too, acks it without rating it. An event published
	// after it shows the rater has gone past it.
	facts, err := js.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	again, err := facts.GetLastMsgForSubject(ctx, orig.Subject)
	require.NoError(t, err)
	require.Equal(t, "scorer", again.Header.Get(bus.HeaderRedriveFor))
	code, out, errOut = run(ctx, client, "", "publish", "--tenant", tenant, "--type", "tool.executed", "--data", `{"tool_name":"later","success":true,"output":"done"}`)
	require.Equal(t, 0, code, errOut)
	later := regexp.MustCompile(`id=(\S+)`).FindStringSubmatch(out)[1]
	ratedSubject := "tool.rated." + tenant
	causes := func() map[string]bool {
		got := map[string]bool{}
		cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{ratedSubject}})
		require.NoError(t, err)
		for {
			m, err := cons.Next(jetstream.FetchMaxWait(200 * time.Millisecond))
			if err != nil {
				return got
			}
			ev, err := bus.Decode(m.Headers(), m.Data())
			require.NoError(t, err)
			got[bus.Causation(ev)] = true
		}
	}
	testenv.Eventually(t, 30*time.Second, func() bool { return causes()[later] }, "the rater rated the later event")
	require.False(t, causes()[ev.ID()], "the rater did not rate the scorer's redrive")

	code, out, _ = run(ctx, client, "", "dlq")
	require.Equal(t, 0, code)
	require.Contains(t, out, "no dead letters")
}

// Commands in another terminal find a running agentq dev through its state
// file, with nothing set; an explicit AGENTQ_NATS_URL wins; the file is
// gone once agentq dev stops. The banner names the database and, for a NATS
// address that is not the default, puts it in front of the commands it
// suggests.
func TestCommandsFindDevInstance(t *testing.T) {
	cache := t.TempDir()
	dbURL := testenv.DatabaseURL(t)
	env := map[string]string{"AGENTQ_DATABASE_URL": dbURL, "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn", "XDG_CACHE_HOME": cache}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	natsURL, banner, stop := startDevBanner(t, ctx, env)
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()

	require.Contains(t, banner, "AGENTQ_NATS_URL="+natsURL+" go run ./cmd/agentq tail quality.changed.demo")
	require.Contains(t, banner, "AGENTQ_NATS_URL="+natsURL+" go run ./cmd/agentq publish --tenant demo")
	require.Contains(t, banner, "database   AGENTQ_DATABASE_URL postgres://", "an explicit database is named, its password redacted")
	statePath := filepath.Join(cache, "agentq", "dev.json")
	require.Contains(t, banner, "state      "+statePath)

	raw, err := os.ReadFile(statePath)
	require.NoError(t, err)
	var st struct {
		NATSURL     string    `json:"nats_url"`
		DatabaseURL string    `json:"database_url"`
		PID         int       `json:"pid"`
		StartedAt   time.Time `json:"started_at"`
	}
	require.NoError(t, json.Unmarshal(raw, &st))
	require.Equal(t, natsURL, st.NATSURL)
	require.Equal(t, dbURL, st.DatabaseURL)
	require.Equal(t, os.Getpid(), st.PID)
	require.WithinDuration(t, time.Now(), st.StartedAt, 5*time.Minute)
	info, err := os.Stat(statePath)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm(), "the database URL may hold a password")

	// Nothing set but where the cache is: the dev instance is used.
	client := map[string]string{"XDG_CACHE_HOME": cache}
	tenant := testenv.Tenant(t)
	code, out, errOut := run(ctx, client, "", "publish", "--tenant", tenant, "--type", "tool.executed", "--data", `{"tool_name":"found","success":true}`)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "published agentq.tool.executed.v1")
	require.Contains(t, errOut, "using the agentq dev instance at "+natsURL)
	code, out, errOut = run(ctx, client, "", "dlq")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "no dead letters")
	require.Contains(t, errOut, "using the agentq dev instance at "+natsURL)

	// An explicit AGENTQ_NATS_URL wins over the dev instance.
	client["AGENTQ_NATS_URL"] = "nats://127.0.0.1:1"
	code, _, errOut = run(ctx, client, "", "dlq")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "connect to NATS at nats://127.0.0.1:1")
	require.NotContains(t, errOut, "using the agentq dev instance")

	stop()
	stopped = true
	require.NoFileExists(t, statePath, "agentq dev removes its state file on exit")
}

// A metrics address that is taken stops agentq dev before its banner, with
// a message that names the address and the way out.
func TestDevMetricsAddressTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	addr := ln.Addr().String()
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": addr, "AGENTQ_LOG_LEVEL": "warn", "XDG_CACHE_HOME": t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, out, errOut := run(ctx, env, "", "dev", "--nats-listen", "127.0.0.1:0")
	require.Equal(t, 1, code)
	require.NotContains(t, out, "agentq dev is running", "no banner advertises an address that is not served")
	require.Contains(t, errOut, "metrics address "+addr+" is not available")
	require.Contains(t, errOut, "AGENTQ_METRICS_ADDR")
	require.Contains(t, errOut, "AGENTQ_METRICS_ADDR=off")
	require.NoFileExists(t, filepath.Join(env["XDG_CACHE_HOME"], "agentq", "dev.json"))
}

// The dev database's start timeout comes from AGENTQ_DEVDB_START_TIMEOUT.
func TestDevDatabaseStartTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("starts node")
	}
	env := map[string]string{"AGENTQ_DEVDB_START_TIMEOUT": "1ms", "AGENTQ_METRICS_ADDR": "off", "AGENTQ_PGLITE_DIR": os.Getenv("AGENTQ_PGLITE_DIR")}
	code, out, errOut := run(context.Background(), env, "", "dev", "--nats-listen", "127.0.0.1:0")
	require.Equal(t, 1, code, out)
	require.Contains(t, errOut, "pglite server not ready after 1ms")
	require.Contains(t, errOut, "AGENTQ_DEVDB_START_TIMEOUT")
}

// Each usage error says what is wrong on its first line, before the usage
// and the flags; -h describes the command.
func TestUsageErrorFirstLine(t *testing.T) {
	tests := []struct {
		args  []string
		code  int
		first string
		more  []string
	}{
		{[]string{"publish"}, 2, "agentq publish: --tenant and --type are required", []string{"usage: agentq publish", "-tenant"}},
		{[]string{"publish", "--type", "tool.executed"}, 2, "agentq publish: --tenant is required", []string{"usage: agentq publish", "-type"}},
		{[]string{"publish", "--tenant", "demo"}, 2, "agentq publish: --type is required", []string{"-data"}},
		{[]string{"publish", "--tenant", "demo", "--type", "tool.executed", "extra"}, 2, `agentq publish: unexpected argument "extra" (the data goes in --data or on stdin)`, nil},
		{[]string{"dlq", "--redrive", "--discard"}, 2, "agentq dlq: --redrive and --discard exclude each other", []string{"-redrive"}},
		{[]string{"dlq", "--limit", "0"}, 2, "agentq dlq: --limit must be at least 1", nil},
		{[]string{"dlq", "scorer"}, 2, `agentq dlq: unexpected argument "scorer" (select with --consumer, --reason or --seq)`, nil},
		{[]string{"dev", "extra"}, 2, `agentq dev: unexpected argument "extra"`, nil},
		{[]string{"tail", "--bogus"}, 2, "flag provided but not defined: -bogus", []string{"usage: agentq tail"}},
		{[]string{"tail", "-h"}, 0, "usage: agentq tail [--all] [--count N] [subject ...]",
			[]string{"subjects", "wildcards", "quality.changed.demo", "'tool.>'", "-count"}},
		{[]string{"migrate", "-h"}, 0, "usage: agentq migrate", []string{"Applies the SQL migrations", "AGENTQ_DATABASE_URL"}},
		{[]string{"dlq", "-h"}, 0, "usage: agentq dlq [--consumer C] [--reason CODE] [--seq N] [--redrive | --discard] [--json]", []string{"payload by reference", "-discard", "-json", "-seq", "-consumer", "-reason", "-redrive", "-limit"}},
		{[]string{"dev", "-h"}, 0, "usage: agentq dev [--data DIR] [--nats-listen HOST:PORT]", []string{"state file", "-nats-listen", "-data"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := run(context.Background(), nil, "", tc.args...)
			require.Equal(t, tc.code, code, errOut)
			require.Empty(t, out)
			first, rest, _ := strings.Cut(errOut, "\n")
			require.Equal(t, tc.first, first)
			for _, want := range tc.more {
				require.Contains(t, rest, want)
			}
		})
	}
}

// Dead letters are listed with their event id and type and the reason on
// one line, also as JSON; --discard removes the selected ones; --redrive of
// a dead letter by reference republishes the original from AGENTQ, without
// its Nats-Msg-Id.
func TestDLQListDiscardRedriveByReference(t *testing.T) {
	ctx, _, natsURL, client := devOnTestDatabase(t)
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	tenant := testenv.Tenant(t)

	newEvent := func(tool string) *nats.Msg {
		ev, err := bus.NewEvent(quality.TypeToolExecuted, tenant, "test", map[string]any{"tool_name": tool, "success": true})
		require.NoError(t, err)
		m, err := bus.Encode(ev)
		require.NoError(t, err)
		return m
	}
	deadLetter := func(orig *nats.Msg, code, reason string, extra map[string]string, carry bool) uint64 {
		dl := nats.NewMsg(bus.DLQSubject("test", orig.Subject))
		if carry {
			for k, v := range orig.Header {
				if k != "Nats-Msg-Id" {
					dl.Header[k] = v
				}
			}
			dl.Data = orig.Data
		}
		dl.Header.Set(bus.HeaderDLQReason, reason)
		dl.Header.Set(bus.HeaderDLQReasonCode, code)
		dl.Header.Set(bus.HeaderDLQConsumer, "test")
		dl.Header.Set(bus.HeaderDLQSubject, orig.Subject)
		for k, v := range extra {
			dl.Header.Set(k, v)
		}
		ack, err := js.PublishMsg(ctx, dl)
		require.NoError(t, err)
		require.Equal(t, bus.DLQName, ack.Stream)
		return ack.Sequence
	}

	// 1: by reference; its original is in AGENTQ.
	orig := newEvent("by-ref")
	origAck, err := js.PublishMsg(ctx, orig)
	require.NoError(t, err)
	origID := orig.Header.Get("Nats-Msg-Id")
	require.NotEmpty(t, origID)
	ceID := orig.Header.Get("ce-id")
	require.NotEmpty(t, ceID)
	seqRef := deadLetter(orig, bus.ReasonMaxDeliver, "failed 5 deliveries", map[string]string{
		bus.HeaderDLQPayload: bus.DLQPayloadReference, bus.HeaderDLQStreamSeq: fmt.Sprint(origAck.Sequence),
		bus.HeaderDLQDeliveries: "5", bus.HeaderDLQEventID: ceID, bus.HeaderDLQEventType: quality.TypeToolExecuted,
	}, false)
	// 2: carries its original but does not name the event: decoded.
	carried := newEvent("carried")
	seqCarried := deadLetter(carried, "schema", "line one\tline  two", map[string]string{bus.HeaderDLQDeliveries: "1"}, true)
	// 3: to be discarded.
	seqDiscard := deadLetter(newEvent("discard-me"), "permanent", "unknown tenant", nil, true)

	code, out, errOut := run(ctx, client, "", "dlq", "--consumer", "test")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, fmt.Sprintf(`^%d \S+ consumer=test subject=tool\.executed\.%s id=%s type=agentq\.tool\.executed\.v1 \(payload by reference: AGENTQ seq %d\) reason=max_deliver deliveries=5: failed 5 deliveries$`,
		seqRef, tenant, regexp.QuoteMeta(ceID), origAck.Sequence), lines[0])
	require.Regexp(t, fmt.Sprintf(`^%d \S+ consumer=test subject=tool\.executed\.%s id=%s type=agentq\.tool\.executed\.v1 reason=schema deliveries=1: line one line two$`,
		seqCarried, tenant, regexp.QuoteMeta(carried.Header.Get("ce-id"))), lines[1])
	require.True(t, strings.HasPrefix(lines[2], fmt.Sprint(seqDiscard)+" "), lines[2])

	code, out, errOut = run(ctx, client, "", "dlq", "--consumer", "test", "--json")
	require.Equal(t, 0, code, errOut)
	var listed []struct {
		Seq         uint64          `json:"seq"`
		Consumer    string          `json:"consumer"`
		Subject     string          `json:"subject"`
		EventID     string          `json:"event_id"`
		EventType   string          `json:"event_type"`
		ReasonCode  string          `json:"reason_code"`
		Reason      string          `json:"reason"`
		Deliveries  uint64          `json:"deliveries"`
		StreamSeq   uint64          `json:"stream_seq"`
		ByReference bool            `json:"by_reference"`
		Data        json.RawMessage `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &listed), out)
	require.Len(t, listed, 3)
	require.Equal(t, seqRef, listed[0].Seq)
	require.Equal(t, "test", listed[0].Consumer)
	require.Equal(t, orig.Subject, listed[0].Subject)
	require.Equal(t, ceID, listed[0].EventID)
	require.Equal(t, quality.TypeToolExecuted, listed[0].EventType)
	require.Equal(t, bus.ReasonMaxDeliver, listed[0].ReasonCode)
	require.Equal(t, uint64(5), listed[0].Deliveries)
	require.Equal(t, origAck.Sequence, listed[0].StreamSeq)
	require.True(t, listed[0].ByReference)
	require.Empty(t, listed[0].Data)
	require.Equal(t, "line one\tline  two", listed[1].Reason, "JSON keeps the reason as it is")
	require.False(t, listed[1].ByReference)
	require.JSONEq(t, string(carried.Data), string(listed[1].Data))

	code, out, errOut = run(ctx, client, "", "dlq", "--discard", "--consumer", "test", "--reason", "permanent")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, fmt.Sprintf("discarded %d consumer=test", seqDiscard))
	require.Contains(t, out, "1 dead letters discarded")
	code, out, _ = run(ctx, client, "", "dlq", "--consumer", "test")
	require.Equal(t, 0, code)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 2, out)
	require.NotContains(t, out, fmt.Sprintf("\n%d ", seqDiscard))

	code, out, errOut = run(ctx, client, "", "dlq", "--redrive", "--seq", fmt.Sprint(seqRef), "--json")
	require.Equal(t, 0, code, errOut)
	var redriven struct {
		Redriven    int `json:"redriven"`
		DeadLetters []struct {
			Seq uint64 `json:"seq"`
		} `json:"dead_letters"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &redriven), out)
	require.Equal(t, 1, redriven.Redriven)
	require.Len(t, redriven.DeadLetters, 1)
	require.Equal(t, seqRef, redriven.DeadLetters[0].Seq)

	facts, err := js.Stream(ctx, bus.StreamName)
	require.NoError(t, err)
	again, err := facts.GetLastMsgForSubject(ctx, orig.Subject)
	require.NoError(t, err)
	require.Greater(t, again.Sequence, origAck.Sequence, "the original was published again")
	require.Equal(t, orig.Data, again.Data)
	require.Equal(t, ceID, again.Header.Get("ce-id"))
	require.Empty(t, again.Header.Get("Nats-Msg-Id"), "redriven without Nats-Msg-Id, or the duplicate window would drop it")
	for k := range again.Header {
		require.False(t, strings.HasPrefix(k, "Agentq-Dlq-"), k)
	}

	code, out, _ = run(ctx, client, "", "dlq", "--consumer", "test")
	require.Equal(t, 0, code)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 1, out)
	require.True(t, strings.HasPrefix(out, fmt.Sprint(seqCarried)+" "), out)
}

// A dead letter by reference whose original the stream no longer holds is
// not redriven: the command says so and fails, and the dead letter stays.
func TestDLQRedriveByReferenceOriginalGone(t *testing.T) {
	ctx, _, natsURL, client := devOnTestDatabase(t)
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	dl := nats.NewMsg(bus.DLQSubject("test", "tool.executed.gone"))
	dl.Header.Set(bus.HeaderDLQReasonCode, bus.ReasonMaxDeliver)
	dl.Header.Set(bus.HeaderDLQConsumer, "test")
	dl.Header.Set(bus.HeaderDLQSubject, "tool.executed.gone")
	dl.Header.Set(bus.HeaderDLQPayload, bus.DLQPayloadReference)
	dl.Header.Set(bus.HeaderDLQStreamSeq, "999999")
	ack, err := js.PublishMsg(ctx, dl)
	require.NoError(t, err)

	code, out, errOut := run(ctx, client, "", "dlq", "--redrive", "--consumer", "test")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, fmt.Sprintf("dead letter %d not redriven: its event (AGENTQ seq 999999) is no longer in the stream", ack.Sequence))
	require.Contains(t, errOut, "1 dead letters not redriven")
	require.Contains(t, out, "0 dead letters redriven")
	code, out, _ = run(ctx, client, "", "dlq", "--consumer", "test")
	require.Equal(t, 0, code)
	require.Contains(t, out, "id=- type=- (payload by reference: AGENTQ seq 999999)")
}

// agentq dev creates its streams before its NATS port opens: a client that
// connects the moment it can and publishes at once succeeds on the first
// try (before, it could get "no responders" while the dev database started).
func TestDevStreamsExistWhenPortOpens(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the dev database")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	// The PGlite dev database: its start is what used to leave the port
	// open without streams for seconds.
	env := map[string]string{"AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn", "AGENTQ_PGLITE_DIR": os.Getenv("AGENTQ_PGLITE_DIR")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	var errOut syncBuffer
	go func() {
		done <- cli.Run(ctx, cli.Env{
			Args: []string{"dev", "--nats-listen", addr}, Getenv: getenv(env, t.TempDir()),
			Stdin: strings.NewReader(""), Stdout: io.Discard, Stderr: &errOut,
		})
	}()

	var nc *nats.Conn
	deadline := time.Now().Add(2 * time.Minute)
	for nc == nil {
		select {
		case code := <-done:
			t.Fatalf("agentq dev exited with %d: %s", code, errOut.String())
		default:
		}
		require.True(t, time.Now().Before(deadline), "NATS never accepted a connection")
		if c, err := nats.Connect("nats://"+addr, nats.Timeout(time.Second)); err == nil {
			nc = c
		} else {
			time.Sleep(2 * time.Millisecond)
		}
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ev, err := bus.NewEvent(quality.TypeToolExecuted, testenv.Tenant(t), "test", map[string]any{"tool_name": "early", "success": true})
	require.NoError(t, err)
	m, err := bus.Encode(ev)
	require.NoError(t, err)
	pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
	defer pcancel()
	ack, err := js.PublishMsg(pctx, m)
	require.NoError(t, err, "the first publish after connecting finds stream AGENTQ")
	require.Equal(t, bus.StreamName, ack.Stream)

	cancel()
	select {
	case code := <-done:
		require.Equal(t, 0, code, errOut.String())
	case <-time.After(60 * time.Second):
		t.Fatal("agentq dev did not stop")
	}
}

// A state file that cannot be written does not stop agentq dev; the banner
// says how other terminals reach it instead.
func TestDevStateFileNotWritable(t *testing.T) {
	cache := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(cache, "agentq"), nil, 0o644)) // a file where the directory would go
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "error", "XDG_CACHE_HOME": cache}
	_, banner, stop := startDevBanner(t, context.Background(), env)
	defer stop()
	require.Contains(t, banner, "state      not written: set AGENTQ_NATS_URL and AGENTQ_DATABASE_URL in other terminals")
}

// Two agentq dev on one --data directory would share a NATS store (both
// acking different events at one sequence) and a database: the second is
// refused before it binds a port or touches the store, naming the first's
// pid, and the first's state files stay as they were.
func TestDevSecondInstanceOnSameDataRefused(t *testing.T) {
	dir, cache := t.TempDir(), t.TempDir()
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn", "XDG_CACHE_HOME": cache}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	natsURL, stop := startDev(t, ctx, env, "--data", dir)
	defer stop()

	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	code, out, errOut := run(sctx, env, "", "dev", "--nats-listen", "127.0.0.1:0", "--data", dir)
	require.Equal(t, 1, code, "refused at once, not run until the deadline: %s", out)
	require.NotContains(t, out, "agentq dev is running")
	require.Contains(t, errOut, fmt.Sprintf("another agentq dev is running on this directory (pid %d)", os.Getpid()))
	require.Contains(t, errOut, dir)
	for _, p := range []string{filepath.Join(dir, "dev.json"), filepath.Join(cache, "agentq", "dev.json")} {
		raw, err := os.ReadFile(p)
		require.NoError(t, err, "the first instance's state file %s stays", p)
		require.Contains(t, string(raw), natsURL, p)
	}

	// The first instance still works, alone on its store.
	client := map[string]string{"AGENTQ_NATS_URL": natsURL}
	code, out, errOut = run(ctx, client, "", "publish", "--tenant", testenv.Tenant(t), "--type", "tool.executed", "--data", `{"tool_name":"x","success":true}`)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "published")
}

// The banner's dev database URL works as printed with psql (libpq refuses
// pgx's default_query_exec_mode), while the state file the agentq commands
// read keeps the parameter PGlite needs for pgx.
func TestDevBannerDatabaseURLForPsql(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the dev database")
	}
	cache := t.TempDir()
	env := map[string]string{"AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn", "AGENTQ_PGLITE_DIR": os.Getenv("AGENTQ_PGLITE_DIR"), "XDG_CACHE_HOME": cache}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, banner, stop := startDevBanner(t, ctx, env)
	defer stop()
	m := regexp.MustCompile(`(?m)^  database   (postgres://\S+)$`).FindStringSubmatch(banner)
	require.NotNil(t, m, banner)
	u, err := url.Parse(m[1])
	require.NoError(t, err)
	for k := range u.Query() {
		require.Contains(t, []string{"sslmode", "connect_timeout", "application_name"}, k, "a parameter libpq (psql) does not know: %s", m[1])
	}
	st, err := os.ReadFile(filepath.Join(cache, "agentq", "dev.json"))
	require.NoError(t, err)
	require.Contains(t, string(st), "default_query_exec_mode=exec", "agentq commands still get the parameter pgx needs with PGlite")

	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("psql is not installed")
	}
	out, err := exec.CommandContext(ctx, psql, m[1], "-XAtc", "select 41 + 1").CombinedOutput()
	require.NoError(t, err, "psql %q: %s", m[1], out)
	require.Equal(t, "42", strings.TrimSpace(string(out)))
}

// Flags may follow the subjects (`tail SUBJECT --all --count 2` used to
// take the flags for subjects and wait forever).
func TestTailFlagsAfterSubjects(t *testing.T) {
	n := testenv.StartNATS(t)
	tenant := testenv.Tenant(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := map[string]string{"AGENTQ_NATS_URL": n.URL}
	for _, tool := range []string{"first", "second", "third"} {
		code, _, errOut := run(ctx, client, "", "publish", "--tenant", tenant, "--type", "tool.executed", "--data", `{"tool_name":"`+tool+`","success":true}`)
		require.Equal(t, 0, code, errOut)
	}
	code, out, errOut := run(ctx, client, "", "tail", "tool.executed."+tenant, "--all", "--count", "2")
	require.NoError(t, ctx.Err(), "tail returned after 2 events, not at the deadline")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, errOut, "tailing tool.executed."+tenant+" ...")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Contains(t, lines[0], `"tool_name":"first"`)
	require.Contains(t, lines[1], `"tool_name":"second"`)
}

// A subject no stream holds, or on which agentq publishes no event, is
// refused with what the subjects are, instead of being followed forever in
// silence.
func TestTailRefusesUnknownSubjects(t *testing.T) {
	tests := []struct {
		subject string
		want    string
	}{
		{"foo.bar.demo", `no stream holds subject "foo.bar.demo": stream AGENTQ holds prompt.>, tool.>`},
		{"search.tools.demo", `no stream holds subject "search.tools.demo"`},
		{"quality.changed", `no agentq event is published on "quality.changed": subjects are <domain>.<event>.<tenant>`},
		{"quality.chnged.demo", `no agentq event is published on "quality.chnged.demo"`},
		{"tool.executed.demo.extra", `no agentq event is published on "tool.executed.demo.extra"`},
		{"quality.changed.Demo", `no agentq event is published on "quality.changed.Demo": "Demo" is not a tenant id`},
		{"quality..demo", `subject "quality..demo" is not a NATS subject`},
		{"tool.>.demo", `subject "tool.>.demo" is not a NATS subject`},
	}
	for _, tc := range tests {
		t.Run(tc.subject, func(t *testing.T) {
			// No server: refused before connecting.
			code, out, errOut := run(context.Background(), map[string]string{"AGENTQ_NATS_URL": "nats://127.0.0.1:1"}, "", "tail", "quality.changed.demo", tc.subject, "--count", "1")
			require.Equal(t, 2, code, errOut)
			require.Empty(t, out)
			first, _, _ := strings.Cut(errOut, "\n")
			require.Contains(t, first, tc.want)
		})
	}
}
