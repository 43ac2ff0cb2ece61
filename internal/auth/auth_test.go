package auth_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/testenv"
	"github.com/agentq/agentq/schemas"
)

func hashed(tok string) string {
	h := sha256.Sum256([]byte(tok))
	return "sha256:" + hex.EncodeToString(h[:])
}

func TestParse(t *testing.T) {
	const plain = "0123456789abcdefXYZ"
	const other = "another-long-token-42"
	for _, tc := range []struct {
		name, file string
		err        string // substring; "" means it parses
		tenants    map[string]string
	}{
		{name: "plain and hashed, comments and blanks",
			file:    "# tenant token\n\nacme " + plain + "\n  demo\t" + hashed(other) + "  \n",
			tenants: map[string]string{plain: "acme", other: "demo", "": "", "nope-nope-nope-nope": ""}},
		{name: "a tenant with two tokens", file: "acme " + plain + "\nacme " + other + "\n",
			tenants: map[string]string{plain: "acme", other: "acme"}},
		{name: "empty file", file: "", tenants: map[string]string{plain: ""}},
		{name: "short token", file: "acme short\n", err: "line 1: a token must have at least 16"},
		{name: "bad tenant", file: "# x\nac.me " + plain + "\n", err: "line 2: \"ac.me\" is not a valid tenant"},
		{name: "an unknown scope", file: "acme " + plain + " extra\n", err: "line 1: the third field, the scope, must be agent or operator"},
		{name: "a scope where the token should be", file: "acme operator " + plain + "\n", err: "line 1: the third field, the scope, must be agent or operator"},
		{name: "four fields", file: "acme " + plain + " operator x\n", err: "line 1: want a tenant, a token and optionally a scope"},
		{name: "bad hash", file: "acme sha256:abc\n", err: "line 1: sha256: wants 64 hex digits"},
		{name: "same token twice", file: "acme " + plain + "\ndemo " + hashed(plain) + "\n", err: "line 2: the same token as line 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			toks, err := auth.Parse(strings.NewReader(tc.file))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.NotContains(t, err.Error(), plain, "an error must never carry a token")
				return
			}
			require.NoError(t, err)
			for tok, want := range tc.tenants {
				got, err := toks.Tenant(tok)
				require.Equal(t, want, got, "token %q", tok)
				switch {
				case want != "":
					require.NoError(t, err)
				case tok == "":
					require.ErrorIs(t, err, auth.ErrNoToken)
				default:
					require.ErrorIs(t, err, auth.ErrUnknownToken)
				}
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	const tok = "0123456789abcdefXYZ"
	toks, err := auth.Parse(strings.NewReader("acme " + tok))
	require.NoError(t, err)
	for _, tc := range []struct {
		header, tenant string
		err            error
	}{
		{"Bearer " + tok, "acme", nil},
		{"bearer  " + tok + " ", "acme", nil},
		{"", "", auth.ErrNoToken},
		{"Basic " + tok, "", auth.ErrNoToken},
		{"Bearer", "", auth.ErrNoToken},
		{"Bearer x" + tok, "", auth.ErrUnknownToken},
	} {
		r := httptest.NewRequest("POST", "/", nil)
		if tc.header != "" {
			r.Header.Set("Authorization", tc.header)
		}
		got, err := toks.Authenticate(r)
		require.Equal(t, tc.tenant, got.Tenant, "header %q", tc.header)
		if tc.err == nil {
			require.NoError(t, err)
		} else {
			require.True(t, errors.Is(err, tc.err), "header %q: %v", tc.header, err)
		}
	}
	var none *auth.Tokens
	_, err = none.Tenant(tok)
	require.ErrorIs(t, err, auth.ErrUnknownToken, "no token file grants nothing")
}

// A line's scope: none is agent, which may send every input but the
// operator commands; operator may send those too.
func TestScopes(t *testing.T) {
	const agent, explicit, operator = "token-of-an-agent-1", "token-of-an-agent-2", "token-of-the-operator"
	toks, err := auth.Parse(strings.NewReader("acme " + agent + "\nacme " + hashed(explicit) + " agent\nacme " + operator + "  operator\n"))
	require.NoError(t, err)
	for tok, want := range map[string]auth.Grant{
		agent:    {Tenant: "acme", Scope: auth.ScopeAgent},
		explicit: {Tenant: "acme", Scope: auth.ScopeAgent},
		operator: {Tenant: "acme", Scope: auth.ScopeOperator},
	} {
		got, err := toks.Grant(tok)
		require.NoError(t, err)
		require.Equal(t, want, got)
		for _, typ := range []string{"agentq.tool.executed.v1", "agentq.prompt.created.v1", "agentq.experiment.requested.v1", "agentq.feedback.submitted.v1"} {
			require.True(t, got.MayPublish(typ), "%s: %s", want.Scope, typ)
		}
		for _, typ := range []string{"agentq.tool.released.v1", "agentq.prompt.activated.v1", "agentq.experiment.cancelled.v1"} {
			require.Equal(t, want.Scope == auth.ScopeOperator, got.MayPublish(typ), "%s: %s", want.Scope, typ)
		}
	}
	reg, err := schemas.Load()
	require.NoError(t, err)
	for _, typ := range auth.OperatorCommands {
		require.True(t, reg.Has(typ), typ)
	}

	tok, line, err := auth.NewScoped("acme", auth.ScopeOperator)
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(line, " operator"), line)
	toks, err = auth.Parse(strings.NewReader(line))
	require.NoError(t, err)
	g, err := toks.Grant(tok)
	require.NoError(t, err)
	require.Equal(t, auth.Grant{Tenant: "acme", Scope: auth.ScopeOperator}, g)
	_, _, err = auth.NewScoped("acme", "admin")
	require.ErrorContains(t, err, `scope "admin" is neither agent nor operator`)
}

func TestNewTokenLineGrantsIt(t *testing.T) {
	tok, line, err := auth.New("acme")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(tok), auth.MinTokenLen)
	require.NotContains(t, line, tok, "the line holds the hash, not the token")
	toks, err := auth.Parse(strings.NewReader(line))
	require.NoError(t, err)
	got, err := toks.Grant(tok)
	require.NoError(t, err)
	require.Equal(t, auth.Grant{Tenant: "acme", Scope: auth.ScopeAgent}, got)
	require.Len(t, strings.Fields(line), 2, "an agent's line has no scope: the default")
	_, _, err = auth.New("no tenant")
	require.Error(t, err)
}

func TestFileWatchAddsRevokesAndSurvivesABadWrite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	a, b := "token-of-acme-0001", "token-of-demo-0002"
	write := func(s string) {
		// A new file renamed over the old one, as editors and config
		// management do; the size changes with each content here.
		tmp := path + ".tmp"
		require.NoError(t, os.WriteFile(tmp, []byte(s), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	write("acme " + a + "\n")
	f, err := auth.Open(path)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var errs []error
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Watch(ctx, 10*time.Millisecond, func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() })
	}()
	t.Cleanup(func() { cancel(); <-done })
	tenant := func(tok string) string { s, _ := f.Tenant(tok); return s }

	write("acme " + a + "\ndemo " + b + "\n")
	testenv.Eventually(t, 5*time.Second, func() bool { return tenant(b) == "demo" }, "an added token is granted")
	write("demo " + b + "\n")
	testenv.Eventually(t, 5*time.Second, func() bool { return tenant(a) == "" }, "a removed token is revoked")
	write("demo short\n")
	testenv.Eventually(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(errs) == 1 }, "a bad file is reported")
	require.Equal(t, "demo", tenant(b), "a bad file keeps the tokens last read")
	mu.Lock()
	require.ErrorContains(t, errs[0], "line 1")
	mu.Unlock()
	write("demo " + b + "\nacme " + a + "\n")
	testenv.Eventually(t, 5*time.Second, func() bool { return tenant(a) == "acme" }, "the file reads again")
	testenv.Eventually(t, 5*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(errs) == 2 }, "recovery is reported")
	mu.Lock()
	require.NoError(t, errs[1])
	mu.Unlock()
}
