package cli_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/cli"
	"github.com/agentq/agentq/internal/testenv"
)

// mcpConfig is an MCP client's configuration of one server, as the README
// gives it.
type mcpConfig struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// readmeMCP returns the README's MCP section: its stdio and HTTP
// configurations and its shell commands.
func readmeMCP(t *testing.T) (stdio, httpCfg mcpConfig, cmds []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	text := string(raw)
	start := strings.Index(text, "\n## Use it from an MCP client\n")
	require.NotEqual(t, -1, start)
	section := text[start+1:]
	section = section[:strings.Index(section[3:], "\n## ")+3]
	var configs []mcpConfig
	for _, block := range regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(section, -1) {
		var doc struct {
			Servers map[string]mcpConfig `json:"mcpServers"`
		}
		require.NoError(t, json.Unmarshal([]byte(block[1]), &doc), block[1])
		configs = append(configs, doc.Servers["agentq"])
	}
	require.Len(t, configs, 2)
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		for _, line := range strings.Split(block[1], "\n") {
			if line = strings.TrimSpace(line); line != "" {
				cmds = append(cmds, line)
			}
		}
	}
	return configs[0], configs[1], cmds
}

// The README's MCP configurations work with the SDK's own client against
// a running agentq dev: the stdio one (its arguments, to the command the
// build makes) and the HTTP one (its URL and header, with a token made and
// served as the README's commands do).
func TestReadmeMCPConfig(t *testing.T) {
	stdio, httpCfg, cmds := readmeMCP(t)
	require.True(t, strings.HasSuffix(stdio.Command, "/bin/agentq"), stdio.Command)
	require.Equal(t, "mcp", stdio.Args[0])
	require.Equal(t, []string{
		"bin/agentq token new --tenant demo > demo-token.txt",
		"sed -n 's/^line for the token file: //p' demo-token.txt >> tokens.txt",
		"AGENTQ_TOKEN_FILE=tokens.txt bin/agentq mcp --http 127.0.0.1:8090",
	}, cmds, "the commands this test plays")

	ctx, _, _, client := devOnTestDatabase(t)
	tenant := testenv.Tenant(t)

	// stdio: the client starts the command with the README's arguments.
	args := slices.Clone(stdio.Args)
	for i := range args {
		if args[i] == "demo" {
			args[i] = tenant
		}
	}
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	var errOut syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, cli.Env{Args: args, Getenv: getenv(client, noDevState), Stdin: c2sR, Stdout: s2cW, Stderr: &errOut})
		s2cW.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "readme", Version: "v0"}, nil).
		Connect(ctx, &mcp.IOTransport{Reader: s2cR, Writer: c2sW}, nil)
	require.NoError(t, err, errOut.String())
	useAgentq(t, cs, tenant)
	require.NoError(t, cs.Close())
	select {
	case code := <-done:
		require.Equal(t, 0, code, "agentq mcp ends when its client does: %s", errOut.String())
	case <-time.After(10 * time.Second):
		t.Fatal("agentq mcp did not end with its client's session")
	}
	require.Contains(t, errOut.String(), "serving on stdio")

	// HTTP: a token made and filed as the README says, the server on a
	// free port instead of 8090.
	dir := t.TempDir()
	code, out, errText := run(ctx, client, "", "token", "new", "--tenant", tenant)
	require.Equal(t, 0, code, errText)
	token := regexp.MustCompile(`(?m)^token: (\S+)$`).FindStringSubmatch(out)[1]
	line := regexp.MustCompile(`(?m)^line for the token file: (.+)$`).FindStringSubmatch(out)[1]
	tokens := filepath.Join(dir, "tokens.txt")
	require.NoError(t, os.WriteFile(tokens, []byte(line+"\n"), 0o600))
	env := map[string]string{"AGENTQ_TOKEN_FILE": tokens, "AGENTQ_METRICS_ADDR": "off"}
	for k, v := range client {
		env[k] = v
	}
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	var hout, herr syncBuffer
	hdone := make(chan int, 1)
	go func() {
		hdone <- cli.Run(hctx, cli.Env{Args: []string{"mcp", "--http", "127.0.0.1:0"}, Getenv: getenv(env, noDevState),
			Stdin: strings.NewReader(""), Stdout: &hout, Stderr: &herr})
	}()
	var addr string
	testenv.Eventually(t, 10*time.Second, func() bool {
		m := regexp.MustCompile(`http://(\S+)/mcp`).FindStringSubmatch(hout.String())
		if m != nil {
			addr = m[1]
		}
		return addr != ""
	}, "agentq mcp --http says where it serves: %s %s", hout.String(), herr.String())
	// Its readiness, as compose's healthcheck asks it.
	code, out, errText = run(ctx, client, "", "healthcheck", "--addr", addr)
	require.Equal(t, 0, code, errText)
	require.Equal(t, "ok\n", out)
	require.Equal(t, "http", httpCfg.Type)
	url := strings.Replace(httpCfg.URL, "127.0.0.1:8090", addr, 1)
	headers := map[string]string{}
	for k, v := range httpCfg.Headers {
		headers[k] = strings.Replace(v, "aq_YOUR_TOKEN", token, 1)
	}
	hc := &http.Client{Transport: withHeaders(headers)}
	cs, err = mcp.NewClient(&mcp.Implementation{Name: "readme", Version: "v0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	require.NoError(t, err, herr.String())
	useAgentq(t, cs, tenant)
	require.NoError(t, cs.Close())
	require.NotContains(t, herr.String(), token, "tokens are never logged")

	// Without the token: refused.
	_, err = mcp.NewClient(&mcp.Implementation{Name: "readme", Version: "v0"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	require.ErrorContains(t, err, "Unauthorized")
	stop()
	require.Equal(t, 0, <-hdone, herr.String())
}

// useAgentq creates a prompt through cs and gets it back rendered, as
// tools and as an MCP prompt, for tenant.
func useAgentq(t *testing.T, cs *mcp.ClientSession, tenant string) {
	t.Helper()
	ctx := context.Background()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		names = append(names, tool.Name)
	}
	require.Len(t, names, 8, "%v", names)
	id := "hello-" + tenant
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "prompt_create", Arguments: map[string]any{
		"id": id, "type": "task", "name": "Hello", "content": "Hello, {{.Who}}!",
		"parameters": []any{map[string]any{"name": "Who", "required": true}}}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "prompt_get", Arguments: map[string]any{"id": id, "params": map[string]any{"Who": "MCP"}}})
	require.NoError(t, err)
	require.False(t, res.IsError, "%v", res.Content)
	got := res.StructuredContent.(map[string]any)
	require.Equal(t, "Hello, MCP!", got["rendered"])
	require.Equal(t, tenant, got["prompt"].(map[string]any)["tenant"])
	p, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: id, Arguments: map[string]string{"Who": "you"}})
	require.NoError(t, err)
	require.Equal(t, "Hello, you!", p.Messages[0].Content.(*mcp.TextContent).Text)
}

// withHeaders sets headers on every request.
type withHeaders map[string]string

func (h withHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Bad uses of agentq mcp are refused before anything starts.
func TestMCPUsage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"mcp", "--http", "127.0.0.1:0", "--tenant", "acme"}, nil, "--tenant and --http exclude each other"},
		{[]string{"mcp", "--http", "127.0.0.1:0"}, nil, "--http needs AGENTQ_TOKEN_FILE"},
		{[]string{"mcp", "--tenant", "Not A Tenant"}, nil, "does not match"},
		{[]string{"mcp", "extra"}, nil, "unexpected arguments"},
	} {
		code, _, errOut := run(ctx, tc.env, "", tc.args...)
		require.NotEqual(t, 0, code, "%v", tc.args)
		require.Contains(t, errOut, tc.want, "%v", tc.args)
	}
}

// agentq mcp --http serves /metrics and /healthz on AGENTQ_METRICS_ADDR, as
// the other agentq processes do, counting /mcp's requests by status code;
// a metrics address set and taken stops it before it serves.
func TestMCPHTTPMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := testenv.StartNATS(t)
	tokens := filepath.Join(t.TempDir(), "tokens.txt")
	require.NoError(t, os.WriteFile(tokens, []byte(testenv.Tenant(t)+" aq_metricstesttoken\n"), 0o600))
	env := map[string]string{"AGENTQ_NATS_URL": n.URL, "AGENTQ_TOKEN_FILE": tokens, "AGENTQ_METRICS_ADDR": "127.0.0.1:0"}

	hctx, stop := context.WithCancel(ctx)
	defer stop()
	var hout, herr syncBuffer
	hdone := make(chan int, 1)
	go func() {
		hdone <- cli.Run(hctx, cli.Env{Args: []string{"mcp", "--http", "127.0.0.1:0"}, Getenv: getenv(env, noDevState),
			Stdin: strings.NewReader(""), Stdout: &hout, Stderr: &herr})
	}()
	var addr, metrics string
	testenv.Eventually(t, 10*time.Second, func() bool {
		m := regexp.MustCompile(`http://(\S+)/mcp .*metrics (http://\S+/metrics)\)`).FindStringSubmatch(hout.String())
		if m != nil {
			addr, metrics = m[1], m[2]
		}
		return m != nil
	}, "agentq mcp --http says where it serves: %s %s", hout.String(), herr.String())

	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	for range 2 {
		resp, err := http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	}
	code, body := get(metrics)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `agentq_mcp_requests_total{code="401"} 2`)
	require.Contains(t, body, "go_goroutines ")
	require.Contains(t, body, "process_cpu_seconds_total ")
	code, body = get(strings.TrimSuffix(metrics, "/metrics") + "/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
	stop()
	require.Equal(t, 0, <-hdone, herr.String())

	// An address set and taken: refused, with the way out.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	env["AGENTQ_METRICS_ADDR"] = taken.Addr().String()
	code, out, errOut := run(ctx, env, "", "mcp", "--http", "127.0.0.1:0")
	require.Equal(t, 1, code)
	require.Empty(t, out, "no line says it serves")
	require.Contains(t, errOut, "metrics address "+taken.Addr().String()+" is not available")
	require.Contains(t, errOut, "AGENTQ_METRICS_ADDR")
}
