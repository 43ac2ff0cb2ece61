package rating

import (
	"sync"

	"github.com/agentq/agentq/internal/database"
)

// pendingSize bounds the ratings kept for a retry: a few batches' worth.
const pendingSize = 4096

// pending holds what LLM calls produced for events not claimed yet, so a
// retry of the same events reuses it instead of paying for the calls
// again: ratings whose transaction has not committed (a batch split after
// a deadlock, a database outage), and summaries whose rating call met an
// outage. It is bounded: past its size the oldest are forgotten, and only
// cost a second call if they come back.
type pending[V any] struct {
	mu    sync.Mutex
	max   int
	byKey map[database.InboxKey]V
	order []database.InboxKey // insertion order, for eviction
}

func newPending[V any](max int) *pending[V] {
	return &pending[V]{max: max, byKey: map[database.InboxKey]V{}}
}

func (p *pending[V]) get(k database.InboxKey) (V, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.byKey[k]
	return o, ok
}

func (p *pending[V]) put(k database.InboxKey, o V) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.byKey[k]; !ok {
		p.order = append(p.order, k)
	}
	p.byKey[k] = o
	for len(p.byKey) > p.max && len(p.order) > 0 {
		delete(p.byKey, p.order[0])
		p.order = p.order[1:]
	}
	if len(p.order) > 2*p.max { // dropped keys leave holes; compact now and then
		live := p.order[:0]
		for _, k := range p.order {
			if _, ok := p.byKey[k]; ok {
				live = append(live, k)
			}
		}
		p.order = live
	}
}

func (p *pending[V]) drop(k database.InboxKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byKey, k)
}

// charges are tokens spent and not yet charged to the tenants' budgets,
// per tenant and day. A call's tokens are added the moment it returns,
// whatever becomes of the rating, and taken out by the transaction that
// charges them (put back if it fails), so every token is charged once.
type charges struct {
	mu sync.Mutex
	by map[budgetKey]int64
}

func (c *charges) add(k budgetKey, n int) {
	if n <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[budgetKey]int64{}
	}
	c.by[k] += int64(n)
}

// of is what k has spent and not been charged yet.
func (c *charges) of(k budgetKey) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[k]
}

// take removes and returns every charge; nil when there is none.
func (c *charges) take() map[budgetKey]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.by
	c.by = nil
	return out
}

// putBack returns charges a failed transaction took.
func (c *charges) putBack(m map[budgetKey]int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[budgetKey]int64{}
	}
	for k, n := range m {
		c.by[k] += n
	}
}
