package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/cli"
	"github.com/agentq/agentq/internal/ingest"
	"github.com/agentq/agentq/internal/testenv"
)

// startIngest runs agentq ingest until stop is called and returns the URL
// it serves.
func startIngest(t *testing.T, ctx context.Context, env map[string]string) (url string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	var errOut syncBuffer
	go func() {
		done <- cli.Run(ctx, cli.Env{
			Args: []string{"ingest", "--addr", "127.0.0.1:0"}, Getenv: getenv(env, t.TempDir()),
			Stdin: strings.NewReader(""), Stdout: pw, Stderr: &errOut,
		})
		pw.Close()
	}()
	sc := bufio.NewScanner(pr)
	for url == "" && sc.Scan() {
		if m := regexp.MustCompile(`POST CloudEvents to (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
			url = m[1]
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	require.NotEmpty(t, url, "agentq ingest says where it serves; it said: %s", errOut.String())
	return url, func() {
		cancel()
		select {
		case code := <-done:
			require.Equal(t, 0, code, errOut.String())
		case <-time.After(30 * time.Second):
			t.Error("agentq ingest did not stop")
		}
	}
}

// post sends body with the token and returns the status and the decoded
// answer.
func post(t *testing.T, url, token, contentType, body string) (int, ingest.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	var resp ingest.Response
	_ = json.Unmarshal(raw, &resp)
	return res.StatusCode, resp, string(raw)
}

// waitQualityChanged returns the data of the quality.changed the scorer
// published for event id of tenant.
func waitQualityChanged(t *testing.T, ctx context.Context, natsURL, tenant, id string) map[string]any {
	t.Helper()
	nc, err := nats.Connect(natsURL)
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	cons, err := js.OrderedConsumer(ctx, bus.StreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"quality.changed." + tenant}})
	require.NoError(t, err)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		m, err := cons.Next(jetstream.FetchMaxWait(time.Until(deadline)))
		require.NoError(t, err, "no quality.changed for %s", id)
		ev, err := bus.Decode(m.Headers(), m.Data())
		require.NoError(t, err)
		if bus.Causation(ev) == id {
			var data map[string]any
			require.NoError(t, json.Unmarshal(ev.Data(), &data))
			return data
		}
	}
	t.Fatalf("no quality.changed caused by %s", id)
	return nil
}

// agentq dev without AGENTQ_TOKEN_FILE serves the endpoint with one
// token, for tenant demo, printed with it and saved beside the state file.
// A structured event POSTed to agentq ingest, as curl sends the README's
// example, is counted by the scorer of that agentq dev; a token added to
// the file while it runs works within seconds.
func TestIngestEndToEnd(t *testing.T) {
	cache := t.TempDir()
	env := map[string]string{"AGENTQ_DATABASE_URL": testenv.DatabaseURL(t), "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn", "XDG_CACHE_HOME": cache}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	natsURL, banner, stopDev := startDevBanner(t, ctx, env)
	defer stopDev()

	m := regexp.MustCompile(`(?m)^  ingest     (http://\S+)   \(CloudEvents over HTTP; tenant demo, bearer token (\S+), saved in (\S+)\)$`).FindStringSubmatch(banner)
	require.NotNil(t, m, banner)
	devURL, devToken, path := m[1], m[2], m[3]
	require.Equal(t, filepath.Join(cache, "agentq", "dev-token"), path)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, devToken+"\n", string(raw))
	info, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	foreign := `{"specversion":"1.0","id":"x1","source":"t","type":"agentq.tool.executed.v1","tenantid":"` + testenv.Tenant(t) + `","data":{"tool_name":"x","success":true}}`
	code, _, answer := post(t, devURL, "", "application/cloudevents+json", foreign)
	require.Equal(t, http.StatusUnauthorized, code, answer)
	// The dev token's tenant is demo: an event of another tenant is
	// refused (and nothing lands in the shared test database's demo).
	code, resp, answer := post(t, devURL, devToken, "application/cloudevents+json", foreign)
	require.Equal(t, http.StatusBadRequest, code, answer)
	require.Equal(t, ingest.ReasonTenantMismatch, resp.Results[0].Reason)
	require.Contains(t, resp.Results[0].Error, "is not the tenant of the token (demo)")

	tenant := testenv.Tenant(t)
	token, line, err := auth.New(tenant)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "tokens")
	require.NoError(t, os.WriteFile(file, []byte(line+"\n"), 0o600))
	url, stop := startIngest(t, ctx, map[string]string{
		"AGENTQ_NATS_URL": natsURL, "AGENTQ_TOKEN_FILE": file, "AGENTQ_METRICS_ADDR": "off", "AGENTQ_LOG_LEVEL": "warn",
	})
	defer stop()

	// The README's example.
	event := `{"specversion":"1.0","id":"call-0001","source":"my-agent","type":"agentq.tool.executed.v1","data":{"tool_name":"pdf_extract","success":true,"latency_ms":340}}`
	code, resp, answer = post(t, url, token, "application/cloudevents+json", event)
	require.Equal(t, http.StatusAccepted, code, answer)
	require.Equal(t, ingest.Result{Index: 0, ID: "call-0001", Type: "agentq.tool.executed.v1", Status: ingest.StatusAccepted, Stream: bus.StreamName, Seq: resp.Results[0].Seq}, resp.Results[0])
	data := waitQualityChanged(t, ctx, natsURL, tenant, "call-0001")
	require.Equal(t, "pdf_extract", data["tool_name"])
	require.EqualValues(t, 1, data["total_calls"])
	require.EqualValues(t, 1, data["success_rate"])

	// Sent again: stored once, counted once.
	code, resp, answer = post(t, url, token, "application/cloudevents+json", event)
	require.Equal(t, http.StatusAccepted, code, answer)
	require.Equal(t, ingest.StatusDuplicate, resp.Results[0].Status)

	// The line has no scope: an agent's token, refused operator commands.
	release := `{"specversion":"1.0","id":"rel-0001","source":"my-agent","type":"agentq.tool.released.v1","data":{"tool_name":"pdf_extract"}}`
	code, resp, answer = post(t, url, token, "application/cloudevents+json", release)
	require.Equal(t, http.StatusForbidden, code, answer)
	require.Equal(t, ingest.ReasonForbidden, resp.Results[0].Reason)

	// A token added to the file is honoured without a restart.
	other := testenv.Tenant(t)
	token2, line2, err := auth.New(other)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, []byte(line+"\n"+line2+"\n"), 0o600))
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, _, _ := post(t, url, token2, "application/cloudevents+json", strings.Replace(event, "call-0001", "call-0002", 1))
		return code == http.StatusAccepted
	}, "the new token works")
}

// Without a token file agentq ingest refuses to start: it would refuse
// every request.
func TestIngestNeedsTokens(t *testing.T) {
	code, _, errOut := run(context.Background(), map[string]string{"AGENTQ_NATS_URL": "nats://127.0.0.1:1"}, "", "ingest")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "AGENTQ_TOKEN_FILE is not set, so every request would be refused")
}
