// Package auth maps bearer tokens to tenants and scopes, for agentq's
// HTTP ways in (the MCP server's streamable HTTP transport and the ingest
// endpoint).
//
// Tokens live in a file named by configuration, one per line:
//
//	# tenant  token                                                                     [scope]
//	acme      sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8
//	acme      sha256:a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3  operator
//	demo      3q2-+7Yc0Zr1ZSg2kYVbLw
//
// A token is written either as its SHA-256 in hex after "sha256:" (so the
// file can be read by more people than the tokens should be) or as itself,
// at least MinTokenLen characters. One token names one tenant; a tenant may
// have several tokens (rotation: add the new one, move clients, remove the
// old). The scope is agent (the default, when the line has none: the
// tenant's agents' events) or operator (the operator commands too:
// OperatorCommands). Only hashes are kept in memory and compared, in
// constant time, and no error or log line ever carries a token: a bad line
// is named by its number.
package auth

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/agentq/agentq/internal/bus"
)

// MinTokenLen is the shortest token accepted in plain form: shorter ones
// can be guessed by anyone who can reach the endpoint.
const MinTokenLen = 16

// ErrNoToken and ErrUnknownToken are what Tenant and Authenticate answer
// for a request with no usable bearer token and with one that names no
// tenant; both are a 401 over HTTP.
var (
	ErrNoToken      = errors.New("auth: no bearer token (send Authorization: Bearer <token>)")
	ErrUnknownToken = errors.New("auth: unknown bearer token")
)

// Scope is what a token may send beyond its tenant's agents' events.
type Scope string

// Scopes.
const (
	// ScopeAgent, the default, may send every input event but the
	// operator commands.
	ScopeAgent Scope = "agent"
	// ScopeOperator may send the operator commands too.
	ScopeOperator Scope = "operator"
)

// OperatorCommands are the input event types only a token of scope
// operator may send: they act on what the tenant's agents share (a
// quarantine lifted, the prompt version every agent gets, an experiment
// stopped), and an agent's token is handed to code the operator does not
// control.
var OperatorCommands = []string{"agentq.tool.released.v1", "agentq.prompt.activated.v1", "agentq.experiment.cancelled.v1"}

// Grant is what a token grants: a tenant, and a scope in it.
type Grant struct {
	Tenant string
	Scope  Scope
}

// MayPublish reports whether the grant lets its holder send an event of
// type typ (the type being an input, which the caller checks).
func (g Grant) MayPublish(typ string) bool {
	return g.Scope == ScopeOperator || !slices.Contains(OperatorCommands, typ)
}

type entry struct {
	hash  [sha256.Size]byte
	grant Grant
}

// Tokens is a set of tokens, each naming a tenant. The zero value holds
// none: every token is unknown.
type Tokens struct {
	entries []entry
}

// Parse reads a token file's text.
func Parse(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 && len(f) != 3 {
			return nil, fmt.Errorf("auth: line %d: want a tenant, a token and optionally a scope (agent or operator), separated by spaces", n)
		}
		tenant, tok, scope := f[0], f[1], ScopeAgent
		if len(f) == 3 {
			switch Scope(f[2]) {
			case ScopeAgent, ScopeOperator:
				scope = Scope(f[2])
			default:
				// Not quoted: a line written in the wrong order has its
				// token here.
				return nil, fmt.Errorf("auth: line %d: the third field, the scope, must be agent or operator", n)
			}
		}
		if !bus.ValidTenant(tenant) {
			return nil, fmt.Errorf("auth: line %d: %q is not a valid tenant (letters, digits, '_' and '-', at most 64)", n, tenant)
		}
		var h [sha256.Size]byte
		if hx, ok := strings.CutPrefix(tok, "sha256:"); ok {
			b, err := hex.DecodeString(hx)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("auth: line %d: sha256: wants 64 hex digits", n)
			}
			copy(h[:], b)
		} else {
			if len(tok) < MinTokenLen {
				return nil, fmt.Errorf("auth: line %d: a token must have at least %d characters (agentq token new makes one)", n, MinTokenLen)
			}
			h = sha256.Sum256([]byte(tok))
		}
		if prev, dup := seen[h]; dup {
			return nil, fmt.Errorf("auth: line %d: the same token as line %d: one token names one tenant", n, prev)
		}
		seen[h] = n
		t.entries = append(t.entries, entry{hash: h, grant: Grant{Tenant: tenant, Scope: scope}})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth: reading tokens: %w", err)
	}
	return t, nil
}

// Load reads the token file at path.
func Load(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth: token file: %w", err)
	}
	defer f.Close()
	t, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.entries)
}

// Grant is what token grants. Every entry is compared, so the time taken
// does not say which one, or whether any, matched.
func (t *Tokens) Grant(token string) (Grant, error) {
	if token == "" {
		return Grant{}, ErrNoToken
	}
	h := sha256.Sum256([]byte(token))
	var g Grant
	if t != nil {
		for _, e := range t.entries {
			if subtle.ConstantTimeCompare(h[:], e.hash[:]) == 1 {
				g = e.grant
			}
		}
	}
	if g.Tenant == "" {
		return Grant{}, ErrUnknownToken
	}
	return g, nil
}

// Tenant is the tenant token names.
func (t *Tokens) Tenant(token string) (string, error) {
	g, err := t.Grant(token)
	return g.Tenant, err
}

// Bearer is the token of an Authorization header value ("Bearer <token>",
// the scheme in any case), or "" if it carries none.
func Bearer(header string) string {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Authenticate is what an HTTP request's bearer token grants.
func (t *Tokens) Authenticate(r *http.Request) (Grant, error) {
	return t.Grant(Bearer(r.Header.Get("Authorization")))
}

// New makes a random token (128 bits, URL-safe) and the line that grants
// it to tenant in a token file, with the token hashed, of scope agent.
func New(tenant string) (token, line string, err error) { return NewScoped(tenant, ScopeAgent) }

// NewScoped is New with the scope: a line of scope agent has none (the
// default), one of scope operator ends with "operator".
func NewScoped(tenant string, scope Scope) (token, line string, err error) {
	if !bus.ValidTenant(tenant) {
		return "", "", fmt.Errorf("auth: %q is not a valid tenant (letters, digits, '_' and '-', at most 64)", tenant)
	}
	if scope != ScopeAgent && scope != ScopeOperator {
		return "", "", fmt.Errorf("auth: scope %q is neither agent nor operator", scope)
	}
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("auth: %w", err)
	}
	token = "aq_" + base64.RawURLEncoding.EncodeToString(b)
	h := sha256.Sum256([]byte(token))
	line = tenant + " sha256:" + hex.EncodeToString(h[:])
	if scope == ScopeOperator {
		line += " " + string(ScopeOperator)
	}
	return token, line, nil
}

// File is a token file kept current: Watch reloads it when it changes,
// so tokens are added and revoked without a restart.
type File struct {
	path string
	cur  atomic.Pointer[Tokens]
	stat atomic.Value // fileStamp of what cur was read from
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// Open loads the token file at path.
func Open(path string) (*File, error) {
	f := &File{path: path}
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) reload() error {
	st, err := os.Stat(f.path)
	if err != nil {
		return fmt.Errorf("auth: token file: %w", err)
	}
	t, err := Load(f.path)
	if err != nil {
		return err
	}
	f.cur.Store(t)
	f.stat.Store(fileStamp{st.ModTime(), st.Size()})
	return nil
}

// Tokens is the file's current set.
func (f *File) Tokens() *Tokens { return f.cur.Load() }

// Tenant is the tenant token names in the file's current set.
func (f *File) Tenant(token string) (string, error) { return f.Tokens().Tenant(token) }

// Grant is what token grants in the file's current set.
func (f *File) Grant(token string) (Grant, error) { return f.Tokens().Grant(token) }

// Authenticate is what an HTTP request's bearer token grants.
func (f *File) Authenticate(r *http.Request) (Grant, error) { return f.Tokens().Authenticate(r) }

// Watch looks at the file every interval until ctx ends and reloads it
// when its time or size changed. A file that no longer reads keeps the
// tokens last read (a half-written file must not lock everyone out), and
// onErr hears why, once per version of the file; it hears nil once the
// file reads again.
func (f *File) Watch(ctx context.Context, every time.Duration, onErr func(error)) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	tried, _ := f.stat.Load().(fileStamp)
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		var err error
		newVersion := false
		if st, serr := os.Stat(f.path); serr != nil {
			err = fmt.Errorf("auth: token file: %w", serr)
			tried = fileStamp{}
		} else if now := (fileStamp{st.ModTime(), st.Size()}); now == tried {
			continue
		} else {
			tried, newVersion = now, true
			err = f.reload()
		}
		// Heard: every bad version of the file, the first failure to
		// find it, and the recovery; not the same missing file each tick.
		if onErr != nil && (err != nil && (newVersion || !failing) || err == nil && failing) {
			onErr(err)
		}
		failing = err != nil
	}
}
