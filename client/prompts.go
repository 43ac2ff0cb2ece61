package client

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"golang.org/x/sync/singleflight"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/library"
)

// GetOption chooses the version GetPrompt returns and how it is rendered.
type GetOption func(*getRequest)

// AtVersion asks for version n (excludes AtLabel).
func AtVersion(n int) GetOption { return func(r *getRequest) { r.Version = n } }

// AtLabel asks for the version a label names, e.g. staging; "latest" is
// the highest version (excludes AtVersion). Without either, GetPrompt
// returns the version labelled production, else the latest.
func AtLabel(label string) GetOption { return func(r *getRequest) { r.Label = label } }

// WithParams renders the prompt with params (by parameter name; those left
// out take their defaults). A rendering that fails is a *ServiceError
// with code rendering or render_limit.
func WithParams(params map[string]any) GetOption {
	return func(r *getRequest) {
		r.params = params
		if r.params == nil {
			r.params = map[string]any{}
		}
	}
}

// getRequest is prompts.get.request.v1 without params: the client renders
// what it has cached itself.
type getRequest struct {
	ID      string `json:"id"`
	Version int    `json:"version,omitempty"`
	Label   string `json:"label,omitempty"`
	Fresh   bool   `json:"fresh,omitempty"`
	params  map[string]any
}

// PromptResult is what GetPrompt returns.
type PromptResult struct {
	Prompt Prompt
	// Rendered is the content rendered with the params and the
	// parameters' defaults. Without WithParams it is empty when the
	// prompt cannot be rendered from its defaults alone (a required
	// parameter): Prompt.Content holds the template.
	Rendered string
	// Cached is true when the answer came from the client's cache,
	// without a round trip.
	Cached bool
	// Stale is true when agentq could not be asked (NATS down, no indexer
	// answering) and this is the last version the client knew, which may
	// have been replaced since.
	Stale bool
}

// CacheStats counts what the prompt cache did since Connect.
type CacheStats struct {
	Hits    uint64 // served from the cache, confirmed fresh
	Misses  uint64 // fetched from the indexer for the caller
	Stale   uint64 // served last-known because agentq could not be asked
	Pushes  uint64 // prompt changes heard, each invalidating the prompt's entries
	Resyncs uint64 // times every entry was invalidated (a reconnect, lost pushes)
}

// GetPrompt returns a prompt version of the tenant's, else a shared one
// (_global), rendered (prompts.get.<tenant>).
//
// Answers are cached. A new version or a moved label, announced by the
// indexer's prompt.indexed result, invalidates the prompt's entries in
// every connected client, which fetch it again at once; so does a
// reconnect (results may have been missed while disconnected). While
// agentq cannot be asked, GetPrompt serves the last version it knew
// (Stale) and, for a prompt it never fetched, returns an
// *UnavailableError without waiting. An unknown id, version or label is
// a *ServiceError matching ErrNotFound.
func (c *Client) GetPrompt(ctx context.Context, id string, opts ...GetOption) (PromptResult, error) {
	if c.closed() {
		return PromptResult{}, ErrClosed
	}
	req := getRequest{ID: id}
	for _, o := range opts {
		o(&req)
	}
	if req.Version > 0 && req.Label != "" {
		return PromptResult{}, &ValidationError{Type: "agentq.prompts.get.request.v1", Problems: []Problem{{Field: "/version", Message: "give a version or a label, not both"}}}
	}
	data, _ := json.Marshal(req)
	if err := c.validate("agentq.prompts.get.request.v1", data); err != nil {
		return PromptResult{}, err
	}
	e, res, err := c.prompts.get(ctx, req)
	if err != nil {
		return PromptResult{}, err
	}
	res.Prompt = e.prompt
	res.Rendered, err = e.render(ctx, req.params)
	if err != nil {
		return PromptResult{}, err
	}
	return res, nil
}

// Warm fetches prompts into the cache (each at the version labelled
// production, else the latest), so the first GetPrompt of each is served
// locally, also should NATS be down by then. It returns the failures,
// joined.
func (c *Client) Warm(ctx context.Context, ids ...string) error {
	var errs []error
	for _, id := range ids {
		if _, err := c.GetPrompt(ctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// CacheStats returns the prompt cache's counters.
func (c *Client) CacheStats() CacheStats {
	s := &c.prompts.stats
	return CacheStats{Hits: s.hits.Load(), Misses: s.misses.Load(), Stale: s.stale.Load(), Pushes: s.pushes.Load(), Resyncs: s.resyncs.Load()}
}

// cacheKey is what one get asks for.
type cacheKey struct {
	id, label string
	version   int
}

func (k cacheKey) String() string {
	switch {
	case k.version > 0:
		return k.id + "@" + strconv.Itoa(k.version)
	case k.label != "":
		return k.id + ":" + k.label
	}
	return k.id
}

// entry is one cached answer. Its prompt and template never change; a
// newer answer replaces the entry.
type entry struct {
	key     cacheKey
	prompt  Prompt
	params  []library.Param
	tmpl    *library.Template // nil when the content does not parse
	fetched time.Time
	elem    *list.Element

	// Guarded by promptCache.mu:
	// invalid: a change was announced, or pushes may have been lost;
	// confirm with the indexer, reading past its memory, before serving.
	invalid bool
	// retryAt: after a failed confirmation, the last-known answer is
	// served until then without asking again.
	retryAt  time.Time
	failures int
	// refreshing: a background refresh after MaxAge is under way.
	refreshing bool
}

// render renders e's content with values, as the indexer does: values nil
// means the prompt was asked for, not a rendering.
func (e *entry) render(ctx context.Context, values map[string]any) (string, error) {
	if values != nil {
		// The values the indexer would see: JSON's types (numbers as
		// float64), so a rendering here equals one there.
		b, err := json.Marshal(values)
		if err != nil {
			return "", &ServiceError{Op: "prompts.get " + e.key.String(), Code: "rendering", Message: "params are not JSON: " + err.Error()}
		}
		values = nil
		if err := json.Unmarshal(b, &values); err != nil {
			return "", err
		}
	}
	var out string
	var err error
	if e.tmpl != nil {
		out, err = e.tmpl.Render(ctx, e.params, values, library.Limits{})
	} else {
		out, err = library.Render(ctx, e.prompt.Content, e.params, values, library.Limits{})
	}
	switch {
	case err == nil:
		return out, nil
	case ctx.Err() != nil:
		return "", fmt.Errorf("render %s@%d: %w", e.prompt.ID, e.prompt.Version, err)
	case values == nil:
		return "", nil
	}
	code := "rendering"
	if errors.Is(err, library.ErrRenderLimit) {
		code = "render_limit"
	}
	return "", &ServiceError{Op: fmt.Sprintf("render %s@%d", e.prompt.ID, e.prompt.Version), Code: code, Message: err.Error()}
}

// promptCache keeps GetPrompt's answers and follows the indexer's
// prompt.indexed results to drop what they change.
type promptCache struct {
	c    *Client
	size int // < 0: no cache

	mu    sync.Mutex
	lru   *list.List // front: most recently used; values *entry
	items map[cacheKey]*entry
	byID  map[string]map[cacheKey]struct{}
	// gen counts invalidations; idGen holds the gen of each id's last,
	// allGen that of the last of everything. A fetch that started at gen
	// g is current only if neither moved past g since.
	gen    uint64
	idGen  map[string]uint64
	allGen uint64
	// What the connection said last: a change of either means pushes may
	// have been missed.
	reconnects uint64
	dropped    int

	flights singleflight.Group
	subs    []*nats.Subscription
	stats   struct{ hits, misses, stale, pushes, resyncs atomic.Uint64 }
}

func newPromptCache(c *Client) *promptCache {
	return &promptCache{c: c, size: c.cfg.CacheSize, lru: list.New(), items: map[cacheKey]*entry{},
		byID: map[string]map[cacheKey]struct{}{}, idGen: map[string]uint64{}}
}

// follow subscribes to the indexer's prompt results for the tenant and
// _global (a tenant without a prompt of its own is answered _global's),
// with core NATS: a result is a push to every client at once.
func (pc *promptCache) follow() error {
	c := pc.c
	subjects := []string{"prompt.indexed." + c.cfg.Tenant}
	if c.cfg.Tenant != bus.GlobalTenant {
		subjects = append(subjects, "prompt.indexed."+bus.GlobalTenant)
	}
	for _, s := range subjects {
		sub, err := c.nc.Subscribe(s, pc.heard)
		if err != nil {
			return err
		}
		pc.subs = append(pc.subs, sub)
		c.subs = append(c.subs, sub)
	}
	// Subscriptions are in place once the server has them: a change
	// after Connect returns is heard.
	if err := c.nc.Flush(); err != nil {
		return err
	}
	pc.reconnects, pc.dropped = c.nc.Stats().Reconnects, pc.droppedNow()
	// Revalidate at once after a reconnect, not at the next get.
	ch := c.nc.StatusChanged(nats.CONNECTED)
	c.background(func() {
		defer c.nc.RemoveStatusListener(ch)
		for {
			select {
			case <-ch:
				pc.checkConnection()
			case <-c.ctx.Done():
				return
			}
		}
	})
	return nil
}

// heard handles one prompt.indexed result.
func (pc *promptCache) heard(m *nats.Msg) {
	var data struct {
		ID string `json:"prompt_id"`
	}
	ev, err := bus.Decode(m.Header, m.Data)
	if err == nil {
		err = bus.DecodeData(ev.Data(), &data)
	}
	pc.stats.pushes.Add(1)
	if err != nil || data.ID == "" {
		// Not one we can read: whatever it changed, drop everything.
		pc.invalidateAll()
		return
	}
	pc.invalidate(data.ID)
}

func (pc *promptCache) droppedNow() int {
	n := 0
	for _, s := range pc.subs {
		if d, err := s.Dropped(); err == nil {
			n += d
		}
	}
	return n
}

// checkConnection invalidates everything when the connection reconnected
// or a push was dropped (a slow consumer) since the last check.
func (pc *promptCache) checkConnection() {
	r, d := pc.c.nc.Stats().Reconnects, pc.droppedNow()
	pc.mu.Lock()
	changed := r != pc.reconnects || d != pc.dropped
	pc.reconnects, pc.dropped = r, d
	pc.mu.Unlock()
	if changed {
		pc.invalidateAll()
	}
}

// invalidate marks id's entries for confirmation and refreshes them.
func (pc *promptCache) invalidate(id string) {
	pc.mu.Lock()
	pc.gen++
	pc.idGen[id] = pc.gen
	if len(pc.idGen) > 2*max(pc.size, 1024) {
		// Forget per-id gens: every fetch under way counts as out of date.
		clear(pc.idGen)
		pc.allGen = pc.gen
	}
	keys := pc.markLocked(pc.byID[id])
	pc.mu.Unlock()
	pc.refreshAll(keys)
}

// invalidateAll marks every entry for confirmation and refreshes them.
func (pc *promptCache) invalidateAll() {
	pc.stats.resyncs.Add(1)
	pc.mu.Lock()
	pc.gen++
	pc.allGen = pc.gen
	clear(pc.idGen)
	all := make(map[cacheKey]struct{}, len(pc.items))
	for k := range pc.items {
		all[k] = struct{}{}
	}
	keys := pc.markLocked(all)
	pc.mu.Unlock()
	pc.refreshAll(keys)
}

func (pc *promptCache) markLocked(keys map[cacheKey]struct{}) []cacheKey {
	out := make([]cacheKey, 0, len(keys))
	for k := range keys {
		if e := pc.items[k]; e != nil {
			e.invalid, e.retryAt, e.failures = true, time.Time{}, 0
			out = append(out, k)
		}
	}
	return out
}

// refreshConcurrency bounds the refreshes one invalidation runs at once.
const refreshConcurrency = 4

// refreshAll fetches keys again in the background, so the next get is
// served locally.
func (pc *promptCache) refreshAll(keys []cacheKey) {
	if len(keys) == 0 || pc.c.closed() {
		return
	}
	c := pc.c
	work := make(chan cacheKey, len(keys))
	for _, k := range keys {
		work <- k
	}
	close(work)
	for range min(refreshConcurrency, len(keys)) {
		c.background(func() {
			for k := range work {
				if c.closed() {
					return
				}
				pc.refresh(k, true)
			}
		})
	}
}

// refresh fetches k again; a failure leaves the entry as it is, to be
// tried again by the next get after its backoff.
func (pc *promptCache) refresh(k cacheKey, fresh bool) {
	ctx, cancel := context.WithTimeout(pc.c.ctx, pc.c.cfg.RequestTimeout)
	defer cancel()
	if _, err := pc.fetch(ctx, k, fresh); err != nil {
		pc.failed(k, err)
	}
}

// get returns the entry answering req, from the cache or fetched.
func (pc *promptCache) get(ctx context.Context, req getRequest) (*entry, PromptResult, error) {
	k := cacheKey{id: req.ID, label: req.Label, version: req.Version}
	if pc.size < 0 {
		e, err := pc.fetch(ctx, k, false)
		if err == nil {
			pc.stats.misses.Add(1)
		}
		return e, PromptResult{}, err
	}
	pc.checkConnection()
	connected := pc.c.nc.Status() == nats.CONNECTED
	now := time.Now()
	pc.mu.Lock()
	e := pc.items[k]
	if e != nil {
		pc.lru.MoveToFront(e.elem)
		switch {
		case !connected:
			pc.mu.Unlock()
			pc.stats.stale.Add(1)
			return e, PromptResult{Cached: true, Stale: true}, nil
		case !e.invalid:
			refresh := now.Sub(e.fetched) >= pc.c.cfg.MaxAge && !e.refreshing
			e.refreshing = e.refreshing || refresh
			pc.mu.Unlock()
			if refresh {
				pc.c.background(func() { pc.refresh(k, false) })
			}
			pc.stats.hits.Add(1)
			return e, PromptResult{Cached: true}, nil
		case now.Before(e.retryAt):
			pc.mu.Unlock()
			pc.stats.stale.Add(1)
			return e, PromptResult{Cached: true, Stale: true}, nil
		}
	}
	pc.mu.Unlock()
	if e == nil && !connected {
		return nil, PromptResult{}, &UnavailableError{Op: "prompts.get " + k.String(),
			err: fmt.Errorf("NATS connection %s and the prompt was never fetched", pc.c.nc.Status())}
	}
	got, err := pc.fetch(ctx, k, e != nil)
	if err == nil {
		pc.stats.misses.Add(1)
		return got, PromptResult{}, nil
	}
	var se *ServiceError
	switch {
	case errors.As(err, &se) && se.Code == "not_found":
		pc.drop(k)
		return nil, PromptResult{}, err
	case e == nil, errors.As(err, &se) && !se.transient(), errors.As(err, new(*ValidationError)):
		return nil, PromptResult{}, err
	}
	// agentq could not be asked: the last-known answer.
	pc.failed(k, err)
	pc.stats.stale.Add(1)
	return e, PromptResult{Cached: true, Stale: true}, nil
}

// fetch asks the indexer for k, joining a fetch of k under way that
// started after the last invalidation of k's id, and stores the answer.
// fresh reads past the indexer's memory (after an invalidation).
func (pc *promptCache) fetch(ctx context.Context, k cacheKey, fresh bool) (*entry, error) {
	start := time.Now()
	pc.mu.Lock()
	gen := max(pc.idGen[k.id], pc.allGen)
	pc.mu.Unlock()
	flight := fmt.Sprintf("%s\x00%s\x00%d\x00%d\x00%t", k.id, k.label, k.version, gen, fresh)
	ch := pc.flights.DoChan(flight, func() (any, error) {
		// The fetch serves every caller that joins it: the client's
		// lifetime and the request timeout bound it, not the first
		// caller's context.
		fctx, cancel := pc.c.requestContext(pc.c.ctx)
		defer cancel()
		var resp struct {
			Prompt Prompt `json:"prompt"`
		}
		req := getRequest{ID: k.id, Version: k.version, Label: k.label, Fresh: fresh}
		if err := pc.c.call(fctx, "prompts.get "+k.String(), "prompts.get."+pc.c.cfg.Tenant, "agentq.prompts.get.request.v1", req, &resp); err != nil {
			return nil, err
		}
		return pc.store(k, resp.Prompt, gen), nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*entry), nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &TimeoutError{Op: "prompts.get " + k.String(), After: time.Since(start).Round(time.Millisecond), err: ctx.Err()}
		}
		return nil, fmt.Errorf("prompts.get %s: %w", k, ctx.Err())
	}
}

// store keeps p as k's answer, current if no invalidation of its id came
// since gen, else to be confirmed again.
func (pc *promptCache) store(k cacheKey, p Prompt, gen uint64) *entry {
	e := &entry{key: k, prompt: p, fetched: time.Now()}
	e.params = make([]library.Param, len(p.Parameters))
	for i, x := range p.Parameters {
		e.params[i] = library.Param{Name: x.Name, Type: x.Type, Required: x.Required, Default: x.Default, Description: x.Description}
	}
	e.tmpl, _ = library.Parse(p.Content) // nil: render reports why
	if pc.size < 0 {
		return e
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	e.invalid = max(pc.idGen[k.id], pc.allGen) != gen
	if old := pc.items[k]; old != nil {
		pc.lru.Remove(old.elem)
	}
	e.elem = pc.lru.PushFront(e)
	pc.items[k] = e
	if pc.byID[k.id] == nil {
		pc.byID[k.id] = map[cacheKey]struct{}{}
	}
	pc.byID[k.id][k] = struct{}{}
	for pc.lru.Len() > pc.size {
		pc.removeLocked(pc.lru.Back().Value.(*entry))
	}
	return e
}

func (pc *promptCache) removeLocked(e *entry) {
	pc.lru.Remove(e.elem)
	delete(pc.items, e.key)
	if keys := pc.byID[e.key.id]; keys != nil {
		delete(keys, e.key)
		if len(keys) == 0 {
			delete(pc.byID, e.key.id)
		}
	}
}

// drop forgets k: the indexer says it does not exist (any more).
func (pc *promptCache) drop(k cacheKey) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if e := pc.items[k]; e != nil {
		pc.removeLocked(e)
	}
}

// failed backs k's confirmation off after err: the last-known answer is
// served meanwhile, without waiting on an indexer that did not answer.
// An answer that k no longer exists drops it.
func (pc *promptCache) failed(k cacheKey, err error) {
	var se *ServiceError
	if errors.As(err, &se) && se.Code == "not_found" {
		pc.drop(k)
		return
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if e := pc.items[k]; e != nil {
		e.refreshing = false
		if !e.invalid {
			return // a refresh after MaxAge: the next get past MaxAge tries again
		}
		e.failures++
		e.retryAt = time.Now().Add(min(retryBase<<min(e.failures-1, 8), retryMax))
	}
}

// Backoff of a failed confirmation.
const (
	retryBase = 250 * time.Millisecond
	retryMax  = 5 * time.Second
)
