package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/schemas"
)

// Defaults of Config.
const (
	DefaultSource         = "agentq-client"
	DefaultMaxPending     = 256
	DefaultAckTimeout     = 5 * time.Second
	DefaultRequestTimeout = 2 * time.Second
	DefaultCacheSize      = 10000
	DefaultMaxAge         = time.Minute
)

// Config configures a Client. Only Tenant is required.
type Config struct {
	// URL of the NATS server(s), comma-separated; default
	// nats://127.0.0.1:4222. Ignored when Conn is set.
	URL string
	// Tenant whose events the client publishes and whose prompts and
	// tools it reads: [a-z0-9_-]{1,64}.
	Tenant string
	// Source is the CloudEvents source of published events, e.g.
	// agent/support-bot. Default "agentq-client".
	Source string
	// NATSOptions are passed to nats.Connect after the client's own
	// (reconnect forever, a name): credentials, TLS, a reconnect wait.
	NATSOptions []nats.Option
	// Conn, when set, is used instead of connecting: the client neither
	// closes it nor replaces its handlers.
	Conn *nats.Conn
	// MaxPending bounds the published events whose JetStream ack is
	// awaited at once; Publish waits while that many are outstanding.
	// Default 256.
	MaxPending int
	// AckTimeout is how long an event's ack is awaited before it fails
	// with a *TimeoutError. Default 5s.
	AckTimeout time.Duration
	// RequestTimeout bounds a search or prompt get whose context has no
	// earlier deadline. Default 2s.
	RequestTimeout time.Duration
	// CacheSize is how many prompt gets (id with a version, a label or
	// neither) the cache keeps, least recently used out first; negative
	// disables the cache. Default 10,000.
	CacheSize int
	// MaxAge is how long a cached prompt is served without asking again
	// in the background, should every push of a change be lost; pushes
	// and reconnects invalidate at once. Default 1m.
	MaxAge time.Duration
}

func (c Config) withDefaults() Config {
	if c.URL == "" {
		c.URL = nats.DefaultURL
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.MaxPending == 0 {
		c.MaxPending = DefaultMaxPending
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	if c.MaxAge == 0 {
		c.MaxAge = DefaultMaxAge
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if !bus.ValidTenant(c.Tenant) {
		errs = append(errs, fmt.Errorf("tenant %q does not match [a-z0-9_-]{1,64}", c.Tenant))
	}
	if c.MaxPending < 1 {
		errs = append(errs, fmt.Errorf("MaxPending %d: must be 1 or more", c.MaxPending))
	}
	if c.AckTimeout < 0 || c.RequestTimeout < 0 || c.MaxAge < 0 {
		errs = append(errs, errors.New("AckTimeout, RequestTimeout and MaxAge must not be negative"))
	}
	return errors.Join(errs...)
}

// Client publishes agentq's input events, searches prompts and tools,
// gets prompts through a cache that changes push invalidate, and follows
// tool alerts, for one tenant. It is safe for concurrent use. Close it
// when done.
type Client struct {
	cfg    Config
	nc     *nats.Conn
	ownsNC bool
	js     jetstream.JetStream
	reg    *schemas.Registry

	pub     publisher
	prompts *promptCache

	// ctx ends at Close; background work (refreshes, watchers) follows it.
	ctx    context.Context
	cancel context.CancelFunc
	bgMu   sync.Mutex
	bgDone bool // Close is waiting for background work: start no more
	wg     sync.WaitGroup
	subs   []*nats.Subscription
}

// background runs f in a goroutine Close waits for, and reports false,
// running nothing, once Close has begun.
func (c *Client) background(f func()) bool {
	c.bgMu.Lock()
	defer c.bgMu.Unlock()
	if c.bgDone {
		return false
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
	return true
}

// Connect connects to NATS and starts following prompt changes. It fails
// when the server cannot be reached at start; afterwards the connection
// is re-established by itself whenever it drops (publishes wait in the
// window, prompt gets serve what is cached).
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("agentq client: %w", err)
	}
	reg, err := schemas.Load()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, reg: reg, nc: cfg.Conn}
	if c.nc == nil {
		opts := append([]nats.Option{nats.Name("agentq-client " + cfg.Tenant), nats.MaxReconnects(-1)}, cfg.NATSOptions...)
		if c.nc, err = nats.Connect(cfg.URL, opts...); err != nil {
			return nil, &UnavailableError{Op: "connect to " + cfg.URL, err: err}
		}
		c.ownsNC = true
	}
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	c.pub.init(cfg.MaxPending, cfg.AckTimeout)
	c.js, err = jetstream.New(c.nc,
		// One more than the client's window: the window blocks first, in
		// Publish, where the caller's context is honoured.
		jetstream.WithPublishAsyncMaxPending(cfg.MaxPending+1),
		jetstream.WithPublishAsyncTimeout(cfg.AckTimeout),
		jetstream.WithPublishAsyncAckHandler(c.pub.acked),
		jetstream.WithPublishAsyncErrHandler(c.pub.failed))
	if err != nil {
		c.Close()
		return nil, err
	}
	c.prompts = newPromptCache(c)
	if err := c.prompts.follow(); err != nil {
		c.Close()
		return nil, fmt.Errorf("agentq client: follow prompt changes: %w", err)
	}
	return c, nil
}

// Conn is the client's NATS connection, for what the client does not do.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Tenant is the client's tenant.
func (c *Client) Tenant() string { return c.cfg.Tenant }

// Close stops following prompt changes and alerts and closes the NATS
// connection the client opened. Events still awaiting their ack are not
// waited for (they fail with a *TimeoutError): call Flush first.
func (c *Client) Close() {
	if c.cancel != nil {
		c.cancel()
	}
	for _, s := range c.subs {
		_ = s.Unsubscribe()
	}
	c.bgMu.Lock()
	c.bgDone = true
	c.bgMu.Unlock()
	c.wg.Wait()
	if c.js != nil {
		c.js.CleanupPublisher() // its reply subscription, on a connection that may stay open
	}
	if c.ownsNC && c.nc != nil {
		c.nc.Close()
	}
}

// closed reports whether Close was called.
func (c *Client) closed() bool { return c.ctx.Err() != nil }

// requestContext bounds ctx by Config.RequestTimeout.
func (c *Client) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RequestTimeout)
}
