// Package search answers agentq's request/reply searches over the indexer's
// tables: search.prompts, search.tools and prompts.get (DESIGN §2.1, §4).
//
// A search runs three stages:
//
//  1. Retrieve K candidates by hybrid retrieval, in one SQL statement: a
//     pgvector HNSW kNN arm (cosine, over the rows embedded with the model
//     in force, through the partial expression index EnsureIndexes
//     creates) and a Postgres full-text arm, fused by reciprocal rank
//     (k = 60). Both arms filter by tenant (the caller's and _global's
//     rows, the caller's shadowing _global's of the same prompt id or
//     tool name), and by type and tags (prompts) or exclusions,
//     quarantine and minimum quality (tools), so K candidates are K
//     eligible ones.
//  2. Re-rank by score = Σ weight × component over similarity (how well
//     the candidate matches: the cosine of its vector to the query's and
//     its full-text coverage of the query, each arm's measure when one arm
//     ran; the fused rank only chooses the K), quality (the read model's
//     quality score, a neutral value when there is none: the scorer's
//     for no observations), recency (exponential decay with a half-life,
//     from now either way) and usage (calls, log-scaled, relative to the
//     most used candidate).
//  3. Assemble: sort by score, cut to the limit, render prompts when
//     params are given, and return every component.
//
// When the embedding provider fails or is slow, or the query has nothing
// to embed, the search answers from the full-text arm alone and says so:
// retrieval {mode: lexical, degraded: true, reason}. When Postgres refuses
// the query's full-text form, it answers from the vector arm alone
// (mode: vector, degraded). Either is counted
// (agentq_search_arm_skipped_total); a warning is logged at most once per
// warnEvery, as any client can cause one per search.
//
// Prompt searches return, per prompt id, the version a consumer gets from
// prompts.get without a version or label: the one labelled production,
// else the latest. Agents search to find a prompt to use; an older or
// unreleased version would be a surprise, and several versions of one
// prompt would crowd out other prompts. prompts.get reaches any version.
package search

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/quality"
)

// Weights weigh the components of a score. They need not add up to 1;
// each must be 0 or more and at least one more than 0.
type Weights struct {
	Similarity float64
	Quality    float64
	Recency    float64
	Usage      float64
}

func (w Weights) validate(name string) error {
	for _, x := range []float64{w.Similarity, w.Quality, w.Recency, w.Usage} {
		if x < 0 || x != x {
			return fmt.Errorf("search: %s weights %+v: each must be 0 or more", name, w)
		}
	}
	if w.Similarity+w.Quality+w.Recency+w.Usage == 0 {
		return fmt.Errorf("search: %s weights are all 0", name)
	}
	return nil
}

// Indexes are the vector index options o's searches run against.
func (o Options) Indexes() IndexOptions { return IndexOptions{Prompts: o.PromptIndex} }

// score is the weighted sum, always in this order, so a client that
// recomputes it from the components gets the same float.
func (w Weights) score(c Components) float64 {
	return w.Similarity*c.Similarity + w.Quality*c.Quality + w.Recency*c.Recency + w.Usage*c.Usage
}

// Defaults of Options.
const (
	DefaultPromptK           = 20
	DefaultPromptLimit       = 5
	MaxPromptLimit           = 50
	DefaultToolK             = 30
	DefaultToolLimit         = 20
	MaxToolLimit             = 100
	DefaultHalfLife          = 168 * time.Hour
	DefaultEFSearch          = 64
	DefaultProbes            = 10
	DefaultLexicalCandidates = 200
	DefaultNeutralQuality    = quality.NoEvidence
	DefaultEmbedTimeout      = time.Second
	DefaultCacheSize         = 1024
	DefaultGetCacheSize      = 4096
	DefaultGetCacheTTL       = 10 * time.Second
	DefaultPrepared          = 32
	DefaultArmsApart         = 1
)

// DefaultPromptWeights and DefaultToolWeights weigh a prompt's and a
// tool's signals: similarity first, then quality, recency and (for
// prompts) usage.
var (
	DefaultPromptWeights = Weights{Similarity: 0.4, Quality: 0.3, Recency: 0.2, Usage: 0.1}
	DefaultToolWeights   = Weights{Similarity: 0.5, Quality: 0.35, Recency: 0.15}
)

// Options configure a Searcher. Zero values take the defaults above.
type Options struct {
	// PromptK and ToolK are how many candidates retrieval hands to
	// re-ranking (each arm retrieves this many, and the fused list is cut
	// to it). A request whose limit is larger gets limit candidates.
	PromptK, ToolK int
	// PromptLimit and ToolLimit are the results returned when a request
	// gives no limit.
	PromptLimit, ToolLimit int
	// PromptWeights and ToolWeights weigh the score's components. A zero
	// Weights takes the default; to switch one component off, set the
	// others.
	PromptWeights, ToolWeights Weights
	// HalfLife is the recency component's half-life: a candidate last
	// created or used HalfLife ago has recency 0.5.
	HalfLife time.Duration
	// EFSearch is hnsw.ef_search for the vector arm, raised to K when
	// lower (pgvector returns at most ef_search rows per index scan).
	EFSearch int
	// PromptIndex is the method of prompts' vector index (IndexOptions);
	// "" is IVFFlat. Probes is ivfflat.probes for an IVFFlat index: the
	// lists a search scans, ~RowsPerList rows each.
	PromptIndex Method
	Probes      int
	// LexicalCandidates bounds the full-text matches ranked per query and
	// per query form (all words, any word), so a query matching most of a
	// large corpus costs a bounded number of row reads.
	LexicalCandidates int
	// NeutralQuality is the quality of a candidate with no figures yet.
	// The default is the scorer's quality for no observations
	// (quality.NoEvidence): another value ranks an unused candidate
	// apart from one whose first calls the scorer has not judged either
	// way. Set it with a value in (0, 1]; 0 takes the default.
	NeutralQuality float64
	// EmbedTimeout bounds embedding the query; past it, the search
	// answers from full text alone (degraded).
	EmbedTimeout time.Duration
	// CacheSize is how many query embeddings are kept (least recently
	// used are dropped); negative disables the cache.
	CacheSize int
	// GetCacheSize is how many prompts.get answers are kept (see
	// promptCache); negative disables the cache. GetCacheTTL bounds how
	// long one is kept when no change to its prompt is heard.
	GetCacheSize int
	GetCacheTTL  time.Duration
	// ArmsApart is how many hybrid searches at a time may run their two
	// arms at once, on two connections, and add up the arms' shares of
	// the fused score in Go (arms.go); the others, and all when it is
	// negative, run one statement. A search never waits for the second
	// connection's slot: past ArmsApart it runs one statement.
	ArmsApart int
	// Prepared is how many search statements each database connection
	// keeps prepared with a generic plan (see statements.go); the least
	// recently used is deallocated. A statement is per tenant and request
	// shape, and a prompt search's plan holds ~0.65 MB of its backend's
	// memory.
	Prepared int
	// Render bounds each rendering of a prompt, in prompts.get and in
	// search.prompts with params (zero fields: library's defaults). A
	// rendering stopped at a limit is answered render_limit.
	Render library.Limits
	// Registerer receives the search's metrics; nil keeps them
	// unregistered.
	Registerer prometheus.Registerer
}

func (o *Options) defaults() error {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.PromptK, DefaultPromptK)
	def(&o.PromptLimit, DefaultPromptLimit)
	def(&o.ToolK, DefaultToolK)
	def(&o.ToolLimit, DefaultToolLimit)
	def(&o.EFSearch, DefaultEFSearch)
	def(&o.Probes, DefaultProbes)
	def(&o.LexicalCandidates, DefaultLexicalCandidates)
	def(&o.CacheSize, DefaultCacheSize)
	def(&o.GetCacheSize, DefaultGetCacheSize)
	def(&o.Prepared, DefaultPrepared)
	def(&o.ArmsApart, DefaultArmsApart)
	if o.GetCacheTTL == 0 {
		o.GetCacheTTL = DefaultGetCacheTTL
	}
	if o.PromptWeights == (Weights{}) {
		o.PromptWeights = DefaultPromptWeights
	}
	if o.ToolWeights == (Weights{}) {
		o.ToolWeights = DefaultToolWeights
	}
	if o.HalfLife == 0 {
		o.HalfLife = DefaultHalfLife
	}
	if o.NeutralQuality == 0 {
		o.NeutralQuality = DefaultNeutralQuality
	}
	if o.EmbedTimeout == 0 {
		o.EmbedTimeout = DefaultEmbedTimeout
	}
	var errs []error
	for _, c := range []struct {
		name    string
		v, most int
	}{
		{"PromptK", o.PromptK, 1000}, {"ToolK", o.ToolK, 1000},
		{"PromptLimit", o.PromptLimit, MaxPromptLimit}, {"ToolLimit", o.ToolLimit, MaxToolLimit},
		{"EFSearch", o.EFSearch, 1000}, {"Probes", o.Probes, maxLists}, {"LexicalCandidates", o.LexicalCandidates, 100000},
		{"Prepared", o.Prepared, 10000},
	} {
		if c.v < 1 || c.v > c.most {
			errs = append(errs, fmt.Errorf("search: %s %d is out of range 1..%d", c.name, c.v, c.most))
		}
	}
	if o.HalfLife < 0 {
		errs = append(errs, fmt.Errorf("search: HalfLife %s is negative", o.HalfLife))
	}
	if o.EmbedTimeout < 0 {
		errs = append(errs, fmt.Errorf("search: EmbedTimeout %s is negative", o.EmbedTimeout))
	}
	if o.NeutralQuality < 0 || o.NeutralQuality > 1 {
		errs = append(errs, fmt.Errorf("search: NeutralQuality %g is out of range 0..1", o.NeutralQuality))
	}
	errs = append(errs, o.PromptWeights.validate("prompt"), o.ToolWeights.validate("tool"), o.Indexes().Validate())
	return errors.Join(errs...)
}

// Embedders are the models in force for each kind; they may be the same.
// A nil Embedder means that kind is searched by full text only (mode
// lexical, not degraded).
type Embedders struct {
	Prompts, Tools embed.Embedder
}

// Mode is how candidates are retrieved.
type Mode string

// Modes of retrieval.
const (
	Hybrid  Mode = "hybrid"  // vector and full-text arms fused
	Lexical Mode = "lexical" // full text only
	Vector  Mode = "vector"  // vectors only

	// vecShare and lexShare are the arms of a hybrid search run as
	// statements of their own (arms.go); never a search's mode.
	vecShare Mode = "vector share"
	lexShare Mode = "lexical share"
)

// vectorArm and lexicalArm say whether a statement of mode runs that arm.
func (m Mode) vectorArm() bool  { return m == Hybrid || m == Vector || m == vecShare }
func (m Mode) lexicalArm() bool { return m == Hybrid || m == Lexical || m == lexShare }

// Searcher answers searches and gets. Safe for concurrent use.
type Searcher struct {
	pool  *pgxpool.Pool
	emb   Embedders
	opts  Options
	log   zerolog.Logger
	force Mode // "" = hybrid when an embedder is set
	cache *cache
	// prompts caches prompts.get; shared by WithMode's copies.
	prompts *promptCache
	pgv     *pgvectorInfo
	// promptTune and toolTune are the retrieval choices per kind.
	promptTune, toolTune tuning
	// simple: the pool speaks pgx's simple protocol, so statements are
	// not prepared (see query).
	simple bool
	// apart holds a slot per hybrid search running its arms apart
	// (arms.go); nil when none may.
	apart chan struct{}
	// runsApart counts the searches that ran apart.
	runsApart *atomic.Int64
	metrics   *metrics
	// warnings throttles the warnings any client's searches can cause.
	warnings *throttle
}

// New returns a Searcher over pool. It fails only on invalid options.
func New(pool *pgxpool.Pool, emb Embedders, opts Options, log zerolog.Logger) (*Searcher, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	return &Searcher{
		pool:       pool,
		emb:        emb,
		opts:       opts,
		log:        log.With().Str("component", "search").Logger(),
		cache:      newCache(opts.CacheSize),
		prompts:    newPromptCache(opts.GetCacheSize, opts.GetCacheTTL),
		pgv:        &pgvectorInfo{},
		promptTune: promptTuning,
		toolTune:   toolTuning,
		simple:     pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol,
		apart:      apartSlots(opts.ArmsApart, pool.Config().MaxConns),
		runsApart:  &atomic.Int64{},
		metrics:    newMetrics(opts.Registerer),
		warnings:   newThrottle(),
	}, nil
}

// WithMode returns a Searcher sharing s's pool, cache and options that
// always retrieves in mode m (agentq eval retrieval compares the arms
// with it). Lexical needs no embedder; Vector and Hybrid fail over to
// lexical, flagged degraded, like s does.
func (s *Searcher) WithMode(m Mode) *Searcher {
	c := *s
	c.force = m
	return &c
}

// Options returns the options in force, defaults filled in.
func (s *Searcher) Options() Options { return s.opts }
