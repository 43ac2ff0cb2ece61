package bus

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fetcher pulls messages for one Consume session and keeps every message
// it has handed out alive until the runner releases it.
//
// Why pull requests and not jetstream's Consume: Consume buffers messages
// inside the client where the runner can neither see nor keep them alive,
// so a slow batch let them outlive AckWait and be redelivered to another
// copy while still queued here. A fetcher only asks for what fits in two
// batches (the one in hand and the next), and a keep-alive loop sends
// InProgress for all of them.
type fetcher struct {
	r    *Runner
	cons jetstream.Consumer
	out  chan prepared
	gone chan struct{} // closed when the durable consumer disappeared

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	quit   chan struct{} // closed when stop has handed everything back

	mu    sync.Mutex
	held  map[jetstream.Msg]struct{}
	freed chan struct{} // signalled when room appears
	// back holds what is to be handed back once the last pull has ended:
	// messages that arrived while stopping, and events the handler gave up
	// because the runner stopped. Nakked earlier, with no delay, they could
	// come straight back into the pull still open.
	back []jetstream.Msg
}

func newFetcher(ctx context.Context, r *Runner, cons jetstream.Consumer) *fetcher {
	limit := 2 * r.opts.BatchSize
	ctx, cancel := context.WithCancel(ctx)
	return &fetcher{
		r: r, cons: cons, ctx: ctx, cancel: cancel,
		out:   make(chan prepared, limit),
		gone:  make(chan struct{}),
		done:  make(chan struct{}),
		quit:  make(chan struct{}),
		held:  make(map[jetstream.Msg]struct{}, limit),
		freed: make(chan struct{}, 1),
	}
}

func (f *fetcher) limit() int { return 2 * f.r.opts.BatchSize }

// run fetches until its context ends or stop is called.
func (f *fetcher) run() {
	defer close(f.done)
	go f.keepAlive()
	for {
		n := f.room()
		if n == 0 {
			return
		}
		mb, err := f.cons.Fetch(min(n, f.r.opts.BatchSize), jetstream.FetchMaxWait(f.r.opts.FetchWait))
		if err != nil {
			if f.consumerGone(err) {
				return
			}
			f.r.log.Warn().Err(err).Msg("fetch")
			f.pause(200 * time.Millisecond)
			continue
		}
		for m := range mb.Messages() {
			f.hold(m)
			if f.ctx.Err() != nil {
				// Stopping: the pull stays open until it expires, so
				// messages keep arriving. Keep each, alive and untouched,
				// until the pull has ended; stop hands them back then.
				f.handBackAtStop(m)
				continue
			}
			d, err := f.r.prepare(m)
			f.out <- prepared{d, err} // never blocks: out holds the limit
		}
		if err := mb.Error(); err != nil && !errors.Is(err, context.Canceled) {
			if f.consumerGone(err) {
				return
			}
			if !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
				f.r.log.Warn().Err(err).Msg("fetch")
				f.pause(200 * time.Millisecond)
			}
		}
	}
}

func (f *fetcher) consumerGone(err error) bool {
	if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		select {
		case <-f.gone:
		default:
			close(f.gone)
		}
		return true
	}
	return false
}

func (f *fetcher) pause(d time.Duration) {
	select {
	case <-f.ctx.Done():
	case <-time.After(d):
	}
}

// room waits until fewer than limit messages are held and returns how many
// more may be fetched, or 0 when the fetcher is stopping.
func (f *fetcher) room() int {
	for {
		f.mu.Lock()
		n := f.limit() - len(f.held)
		f.mu.Unlock()
		if f.ctx.Err() != nil {
			return 0
		}
		if n > 0 {
			return n
		}
		select {
		case <-f.ctx.Done():
			return 0
		case <-f.freed:
		}
	}
}

// handBackAtStop keeps m, held, until stop hands it back.
func (f *fetcher) handBackAtStop(m jetstream.Msg) {
	f.mu.Lock()
	f.back = append(f.back, m)
	f.mu.Unlock()
}

func (f *fetcher) hold(m jetstream.Msg) {
	f.mu.Lock()
	f.held[m] = struct{}{}
	f.mu.Unlock()
}

// release stops keeping m alive; the runner has settled it.
func (f *fetcher) release(m jetstream.Msg) {
	f.mu.Lock()
	delete(f.held, m)
	f.mu.Unlock()
	select {
	case f.freed <- struct{}{}:
	default:
	}
}

// keepAlive tells JetStream, three times per AckWait, that every held
// message is still being worked on, so none is redelivered meanwhile.
func (f *fetcher) keepAlive() {
	t := time.NewTicker(f.r.opts.AckWait / 3)
	defer t.Stop()
	for {
		select {
		case <-f.quit:
			return
		case <-t.C:
		}
		f.mu.Lock()
		msgs := make([]jetstream.Msg, 0, len(f.held))
		for m := range f.held {
			msgs = append(msgs, m)
		}
		f.mu.Unlock()
		for _, m := range msgs {
			_ = m.InProgress() // an already settled message ignores it
		}
	}
}

// stop ends fetching, waits for the pull in flight to expire, and then
// hands back everything held and not settled, with no delay: no pull of
// this runner is open any more, so another copy takes it at once. None of
// it was marked in hand in the ledger (only what reached the handler is),
// and the records of what the handler gave up were written when it was
// settled: they are flushed first, so the next delivery reads them.
func (f *fetcher) stop() {
	defer close(f.quit)
	f.cancel()
	<-f.done
	f.r.ledger.flush()
	f.mu.Lock()
	back := f.back
	f.back = nil
	f.mu.Unlock()
drain:
	for {
		select {
		case p := <-f.out:
			back = append(back, p.d.msg)
		default:
			break drain
		}
	}
	for _, m := range back {
		_ = m.Nak()
		f.r.metrics.naks.Inc()
		f.release(m)
	}
}
