package search

import (
	"container/list"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/library"
)

// promptCache keeps prompts.get's resolved prompts, so the call an agent
// makes on every run is answered without a database round trip. A prompt
// version's content never changes, but which version a label or "no
// version" names, and a version's labels, do: entries are dropped when the
// prompt id changes (PromptChanged: the indexer copy that wrote it calls it
// after commit, before its results are published; every other copy calls
// it when the result reaches it, see FollowPromptChanges), all of them
// when the NATS connection was lost (results may have been missed), and
// each after a TTL at the latest.
//
// A read that started before an invalidation is not stored (gen), so an
// answer from before a change cannot outlive it. Cached prompts are shared
// and must not be modified.
type promptCache struct {
	mu    sync.Mutex
	size  int
	ttl   time.Duration
	now   func() time.Time
	gen   uint64
	order *list.List // front = most recent; values are *promptEntry
	items map[getKey]*list.Element
	byID  map[string]map[getKey]struct{}
	// epoch, when set, counts the NATS connection's reconnects: a change
	// drops everything, as results may have been missed meanwhile.
	epoch     func() uint64
	epochSeen uint64
}

// getKey is one prompts.get request's resolution: the caller's tenant and
// what it asked for.
type getKey struct {
	tenant, id, label string
	version           int
}

type promptEntry struct {
	key     getKey
	prompt  library.Prompt
	tmpl    *library.Template // the content parsed, nil if it does not parse
	expires time.Time
}

func newPromptCache(size int, ttl time.Duration) *promptCache {
	if size <= 0 || ttl <= 0 {
		return nil
	}
	return &promptCache{size: size, ttl: ttl, now: time.Now, order: list.New(),
		items: map[getKey]*list.Element{}, byID: map[string]map[getKey]struct{}{}}
}

// get returns the cached prompt of k and its parsed content, and the
// generation a caller that misses passes to put.
func (c *promptCache) get(k getKey) (library.Prompt, *library.Template, uint64, bool) {
	if c == nil {
		return library.Prompt{}, nil, 0, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != nil {
		if e := c.epoch(); e != c.epochSeen {
			c.epochSeen = e
			c.clear()
		}
	}
	el, ok := c.items[k]
	if !ok {
		return library.Prompt{}, nil, c.gen, false
	}
	e := el.Value.(*promptEntry)
	if !c.now().Before(e.expires) {
		c.remove(el)
		return library.Prompt{}, nil, c.gen, false
	}
	c.order.MoveToFront(el)
	return e.prompt, e.tmpl, c.gen, true
}

// put stores p and its parsed content for k unless something changed
// since gen was read.
func (c *promptCache) put(k getKey, p library.Prompt, tmpl *library.Template, gen uint64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if el, ok := c.items[k]; ok {
		c.remove(el)
	}
	c.items[k] = c.order.PushFront(&promptEntry{key: k, prompt: p, tmpl: tmpl, expires: c.now().Add(c.ttl)})
	if c.byID[k.id] == nil {
		c.byID[k.id] = map[getKey]struct{}{}
	}
	c.byID[k.id][k] = struct{}{}
	if c.order.Len() > c.size {
		c.remove(c.order.Back())
	}
}

func (c *promptCache) remove(el *list.Element) {
	k := el.Value.(*promptEntry).key
	c.order.Remove(el)
	delete(c.items, k)
	if keys := c.byID[k.id]; keys != nil {
		delete(keys, k)
		if len(keys) == 0 {
			delete(c.byID, k.id)
		}
	}
}

// invalidate drops what a change to tenant's prompt id may have made
// stale: that tenant's entries for id, or every tenant's when the prompt
// is _global (a tenant without the id of its own is answered _global's).
func (c *promptCache) invalidate(tenant, id string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for k := range c.byID[id] {
		if tenant == bus.GlobalTenant || k.tenant == tenant {
			c.remove(c.items[k])
		}
	}
}

func (c *promptCache) flush() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clear()
}

func (c *promptCache) clear() {
	c.gen++
	c.order.Init()
	clear(c.items)
	clear(c.byID)
}

// PromptChanged tells the searcher that tenant's prompt id has a new
// version or a moved label: prompts.get answers for it are read afresh.
func (s *Searcher) PromptChanged(tenant, id string) { s.prompts.invalidate(tenant, id) }

// PromptResultSubject is what FollowPromptChanges listens to: every
// tenant's prompt.indexed, published by the indexer copy that made the
// change.
const PromptResultSubject = "prompt.indexed.*"

// FollowPromptChanges keeps the prompts.get cache in step with the other
// indexer copies: each prompt.indexed result (a core subscription, not the
// queue group: every copy hears every result) drops the cached answers for
// its prompt id, and a reconnect drops them all. The returned func stops
// following.
func (s *Searcher) FollowPromptChanges(nc *nats.Conn) (func(), error) {
	if s.prompts == nil {
		return func() {}, nil
	}
	sub, err := nc.Subscribe(PromptResultSubject, func(m *nats.Msg) {
		tenant := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
		var data struct {
			ID string `json:"prompt_id"` // prompt.indexed.v1
		}
		ev, err := bus.Decode(m.Header, m.Data)
		if err == nil {
			err = bus.DecodeData(ev.Data(), &data)
		}
		if err != nil || data.ID == "" {
			// Not one we can read: forget everything of the tenant's
			// rather than keep what it may have changed.
			s.log.Warn().Err(err).Str("subject", m.Subject).Msg("prompt result unreadable; prompts.get cache dropped")
			s.prompts.flush()
			return
		}
		s.PromptChanged(tenant, data.ID)
	})
	if err != nil {
		return nil, err
	}
	// Results published while the connection was down were not heard.
	epoch := func() uint64 { return nc.Stats().Reconnects }
	s.prompts.mu.Lock()
	s.prompts.epoch, s.prompts.epochSeen = epoch, epoch()
	s.prompts.mu.Unlock()
	return func() { _ = sub.Unsubscribe() }, nil
}
