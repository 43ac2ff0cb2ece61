package rating

import (
	"sync"

	"github.com/agentq/agentq/internal/database"
)

// pendingSize bounds the ratings kept for a retry: a few batches' worth.
const pendingSize = 4096

// pending holds LLM ratings whose transaction has not committed yet, so
// a retry of the same events (a batch split after a deadlock, a database
// outage) reuses them instead of paying for the calls again. It is
// bounded: past its size the oldest are forgotten, and only cost a second
// call if they come back.
type pending struct {
	mu    sync.Mutex
	max   int
	byKey map[database.InboxKey]outcome
	order []database.InboxKey // insertion order, for eviction
}

func newPending(max int) *pending {
	return &pending{max: max, byKey: map[database.InboxKey]outcome{}}
}

func (p *pending) get(k database.InboxKey) (outcome, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.byKey[k]
	return o, ok
}

func (p *pending) put(k database.InboxKey, o outcome) {
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

func (p *pending) drop(k database.InboxKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byKey, k)
}
