package config_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/config"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestDefaults(t *testing.T) {
	cfg, err := config.Load(env(nil))
	require.NoError(t, err)
	require.Equal(t, "nats://127.0.0.1:4222", cfg.NATSURL)
	require.Zero(t, cfg.BatchSize, "unset: each consumer's default")
	require.Equal(t, 5, cfg.MaxDeliver)
	require.Equal(t, 30*time.Second, cfg.AckWait)
	require.Equal(t, 2*time.Minute, cfg.Stream.Duplicates)
	require.Equal(t, 10*time.Second, cfg.RelayInterval)
	require.Equal(t, 2, cfg.IndexerWriters)
	require.Equal(t, 30*time.Second, cfg.RelayMinAge)
	require.Equal(t, int64(-1), cfg.Stream.MaxBytes)
	require.Zero(t, cfg.Stream.MaxAge)
	r := cfg.Runner("scorer", "tool.executed.*")
	require.Equal(t, "scorer", r.Consumer)
	require.Equal(t, cfg.ShutdownGrace, r.Grace)
	require.Equal(t, 2000, r.BatchSize)
	require.Equal(t, 2, r.Lanes)
	for _, name := range []string{"indexer", "rater", "degrader", "lab"} {
		o := cfg.Runner(name, "x.*")
		require.Equal(t, config.DefaultBatchSize, o.BatchSize, name)
		require.LessOrEqual(t, o.Lanes, 1, name)
	}
}

func TestInvalidValues(t *testing.T) {
	tests := []struct {
		name, key, value, want string
	}{
		{"batch not a number", "AGENTQ_BATCH_SIZE", "many", "AGENTQ_BATCH_SIZE: \"many\" is not an integer"},
		{"batch too big", "AGENTQ_BATCH_SIZE", "100000", "AGENTQ_BATCH_SIZE 100000: want 1..10000"},
		{"bad duration", "AGENTQ_ACK_WAIT", "soon", "AGENTQ_ACK_WAIT: \"soon\" is not a duration"},
		{"ack wait too short", "AGENTQ_ACK_WAIT", "10ms", "AGENTQ_ACK_WAIT 10ms: want at least 1s"},
		{"log level", "AGENTQ_LOG_LEVEL", "loud", "AGENTQ_LOG_LEVEL \"loud\""},
		{"replicas", "AGENTQ_STREAM_REPLICAS", "7", "AGENTQ_STREAM_REPLICAS 7: want 1..5"},
		{"max bytes", "AGENTQ_STREAM_MAX_BYTES", "0", "AGENTQ_STREAM_MAX_BYTES 0"},
		{"payload", "AGENTQ_MAX_PAYLOAD", "10", "AGENTQ_MAX_PAYLOAD 10"},
		{"max deliver", "AGENTQ_MAX_DELIVER", "0", "AGENTQ_MAX_DELIVER 0"},
		{"negative retention", "AGENTQ_INBOX_RETENTION", "-1h", "AGENTQ_INBOX_RETENTION must not be negative"},
		{"indexer writers", "AGENTQ_INDEXER_WRITERS", "0", "AGENTQ_INDEXER_WRITERS 0: want 1..64"},
		{"relay interval", "AGENTQ_OUTBOX_RELAY_INTERVAL", "0s", "AGENTQ_OUTBOX_RELAY_INTERVAL must be positive"},
		{"relay min age", "AGENTQ_OUTBOX_RELAY_MIN_AGE", "-1s", "AGENTQ_OUTBOX_RELAY_MIN_AGE must be positive"},
		{"relay min age beyond the duplicate window", "AGENTQ_OUTBOX_RELAY_MIN_AGE", "3m", "AGENTQ_OUTBOX_RELAY_MIN_AGE 3m0s must be shorter than AGENTQ_STREAM_DUPLICATE_WINDOW 2m0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(env(map[string]string{tc.key: tc.value}))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestInboxRetentionBelowStreamAge(t *testing.T) {
	_, err := config.Load(env(map[string]string{"AGENTQ_STREAM_MAX_AGE": "720h", "AGENTQ_INBOX_RETENTION": "24h"}))
	require.ErrorContains(t, err, "a replay could apply events twice")
	_, err = config.Load(env(map[string]string{"AGENTQ_STREAM_MAX_AGE": "720h", "AGENTQ_INBOX_RETENTION": "1000h"}))
	require.NoError(t, err)
}

func TestOverrides(t *testing.T) {
	cfg, err := config.Load(env(map[string]string{
		"AGENTQ_STREAM_MAX_AGE": "720h", "AGENTQ_STREAM_REPLICAS": "3", "AGENTQ_BATCH_SIZE": " 50 ",
	}))
	require.NoError(t, err)
	require.Equal(t, 720*time.Hour, cfg.Stream.MaxAge)
	require.Equal(t, 3, cfg.Stream.Replicas)
	require.Equal(t, 50, cfg.BatchSize)
}

// The operations docs' configuration table lists every variable with its default.
func TestDocsListEveryVariable(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	require.NoError(t, err)
	readme := string(b)
	for _, v := range config.Vars {
		def := "(empty)"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		require.True(t, strings.Contains(readme, "| `"+v.Name+"` | "+def+" |"), "docs/operations.md lacks a row for %s with default %s", v.Name, def)
	}
}

func TestPerConsumerOverrides(t *testing.T) {
	cfg, err := config.Load(env(map[string]string{
		"AGENTQ_BATCH_SIZE": "200", "AGENTQ_RATER_BATCH_SIZE": "64", "AGENTQ_RATER_ACK_WAIT": "2m", "AGENTQ_RATER_HANDLER_TIMEOUT": "90s",
	}))
	require.NoError(t, err)
	r := cfg.Runner("rater", "tool.executed.*")
	require.Equal(t, 64, r.BatchSize)
	require.Equal(t, 2*time.Minute, r.AckWait)
	require.Equal(t, 90*time.Second, r.HandlerTimeout)
	s := cfg.Runner("scorer", "tool.executed.*")
	require.Equal(t, 200, s.BatchSize, "other consumers keep the process-wide value")
	require.Equal(t, 30*time.Second, s.AckWait)
	require.Equal(t, 30*time.Second, s.HandlerTimeout)

	require.Equal(t, 2, s.Lanes, "the scorer's own default lanes")

	cfg, err = config.Load(env(map[string]string{"AGENTQ_SCORER_LANES": "3", "AGENTQ_SCORER_BATCH_SIZE": "700", "AGENTQ_RATER_LANES": "2"}))
	require.NoError(t, err)
	s = cfg.Runner("scorer", "tool.executed.*")
	require.Equal(t, 3, s.Lanes)
	require.Equal(t, 700, s.BatchSize)
	require.Equal(t, 2, cfg.Runner("rater", "tool.executed.*").Lanes)
	require.Equal(t, config.DefaultBatchSize, cfg.Runner("rater", "tool.executed.*").BatchSize)

	for key, want := range map[string]string{
		"AGENTQ_SCORER_BATCH_SIZE": "AGENTQ_SCORER_BATCH_SIZE 0: want 1..10000",
		"AGENTQ_BATCH_SIZE":        "AGENTQ_BATCH_SIZE 0: want 1..10000",
		"AGENTQ_SCORER_LANES":      "AGENTQ_SCORER_LANES 0: want 1..16",
	} {
		_, err = config.Load(env(map[string]string{key: "0"}))
		require.ErrorContains(t, err, want)
	}
	_, err = config.Load(env(map[string]string{"AGENTQ_LAB_LANES": "17"}))
	require.ErrorContains(t, err, "AGENTQ_LAB_LANES 17: want 1..16")
}

func TestRetentionAgainstAStreamThatKeepsForever(t *testing.T) {
	// The stream keeps events forever (max age 0): an inbox that forgets
	// would let a replay apply old events twice.
	_, err := config.Load(env(map[string]string{"AGENTQ_INBOX_RETENTION": "720h"}))
	require.ErrorContains(t, err, "a replay could apply events twice")
}

func TestRaterSettings(t *testing.T) {
	cfg, err := config.Load(env(nil))
	require.NoError(t, err)
	require.Equal(t, config.Rater{Timeout: 5 * time.Second, Concurrency: 16, Sample: 1, MaxInputTokens: 2000}, cfg.Rater)
	require.Equal(t, 3, cfg.LLM.MaxRetries)
	for key, want := range map[string]string{
		"AGENTQ_RATER_SAMPLE":      "AGENTQ_RATER_SAMPLE 1.5: want 0..1",
		"AGENTQ_RATER_CONCURRENCY": "AGENTQ_RATER_CONCURRENCY 0: want 1..256",
		"AGENTQ_RATER_SUMMARIZE":   `AGENTQ_RATER_SUMMARIZE: "maybe" is not true or false`,
	} {
		value := map[string]string{"AGENTQ_RATER_SAMPLE": "1.5", "AGENTQ_RATER_CONCURRENCY": "0", "AGENTQ_RATER_SUMMARIZE": "maybe"}[key]
		_, err := config.Load(env(map[string]string{key: value}))
		require.ErrorContains(t, err, want)
	}
}

func TestMetricsOff(t *testing.T) {
	cfg, err := config.Load(env(map[string]string{"AGENTQ_METRICS_ADDR": "off"}))
	require.NoError(t, err)
	require.Empty(t, cfg.MetricsAddr)
	cfg, err = config.Load(env(nil))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9090", cfg.MetricsAddr, "loopback by default")
}

func TestEmbedProviderSettings(t *testing.T) {
	cfg, err := config.Load(env(nil))
	require.NoError(t, err)
	// The defaults are the provider client's own (DefaultEmbedTimeout,
	// DefaultBatchSize); internal/indexer checks they agree.
	require.Equal(t, 30*time.Second, cfg.Embed.Timeout)
	require.Equal(t, 64, cfg.Embed.BatchSize)

	valid := []struct {
		name, timeout, batch string
		wantTimeout          time.Duration
		wantBatch            int
	}{
		{"slow local server", "2m", "8", 2 * time.Minute, 8},
		{"one text a request", "500ms", "1", 500 * time.Millisecond, 1},
		{"largest batch", "30s", "1024", 30 * time.Second, 1024},
		{"spaces around", " 45s ", " 128 ", 45 * time.Second, 128},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(env(map[string]string{"AGENTQ_EMBED_TIMEOUT": tc.timeout, "AGENTQ_EMBED_BATCH_SIZE": tc.batch}))
			require.NoError(t, err)
			require.Equal(t, tc.wantTimeout, cfg.Embed.Timeout)
			require.Equal(t, tc.wantBatch, cfg.Embed.BatchSize)
		})
	}

	invalid := []struct {
		name, key, value, want string
	}{
		{"timeout not a duration", "AGENTQ_EMBED_TIMEOUT", "30", `AGENTQ_EMBED_TIMEOUT: "30" is not a duration like 30s or 720h`},
		{"timeout zero", "AGENTQ_EMBED_TIMEOUT", "0", "AGENTQ_EMBED_TIMEOUT must be positive"},
		{"timeout negative", "AGENTQ_EMBED_TIMEOUT", "-5s", "AGENTQ_EMBED_TIMEOUT must be positive"},
		{"batch not a number", "AGENTQ_EMBED_BATCH_SIZE", "lots", `AGENTQ_EMBED_BATCH_SIZE: "lots" is not an integer`},
		{"batch zero", "AGENTQ_EMBED_BATCH_SIZE", "0", "AGENTQ_EMBED_BATCH_SIZE 0: want 1..1024"},
		{"batch negative", "AGENTQ_EMBED_BATCH_SIZE", "-1", "AGENTQ_EMBED_BATCH_SIZE -1: want 1..1024"},
		{"batch beyond the answer limit", "AGENTQ_EMBED_BATCH_SIZE", "2048", "AGENTQ_EMBED_BATCH_SIZE 2048: want 1..1024"},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(env(map[string]string{tc.key: tc.value}))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestSentenceDir(t *testing.T) {
	tests := []struct {
		name, sentence, pglite, want string
	}{
		{"neither: walk up", "", "", ""},
		{"the dev database's node_modules", "", "/srv/pglite", "/srv/pglite"},
		{"its own", "/opt/weights", "", "/opt/weights"},
		{"its own wins", "/opt/weights", "/srv/pglite", "/opt/weights"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(env(map[string]string{"AGENTQ_EMBED_SENTENCE_DIR": tc.sentence, "AGENTQ_PGLITE_DIR": tc.pglite}))
			require.NoError(t, err)
			require.Equal(t, tc.sentence, cfg.EmbedSentenceDir)
			require.Equal(t, tc.want, cfg.SentenceDir())
		})
	}
}

func TestSearchWeights(t *testing.T) {
	valid := []struct {
		name, prompt, tool string
		wantPrompt         [4]float64
		wantTool           [4]float64
	}{
		{"defaults", "", "", [4]float64{0.4, 0.3, 0.2, 0.1}, [4]float64{0.5, 0.35, 0.15, 0}},
		{"quality heavy", "0.1,0.8,0.1,0", "0.1, 0.9, 0, 0", [4]float64{0.1, 0.8, 0.1, 0}, [4]float64{0.1, 0.9, 0, 0}},
		{"similarity only", "1,0,0,0", "1,0,0,0", [4]float64{1, 0, 0, 0}, [4]float64{1, 0, 0, 0}},
		{"need not add up to 1", "2,3,0,1", "0,0,0,7", [4]float64{2, 3, 0, 1}, [4]float64{0, 0, 0, 7}},
	}
	for _, tc := range valid {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Load(env(map[string]string{"AGENTQ_SEARCH_PROMPT_WEIGHTS": tc.prompt, "AGENTQ_SEARCH_TOOL_WEIGHTS": tc.tool}))
			require.NoError(t, err)
			require.Equal(t, tc.wantPrompt, cfg.Search.PromptWeights)
			require.Equal(t, tc.wantTool, cfg.Search.ToolWeights)
		})
	}

	invalid := []struct {
		name, key, value, want string
	}{
		{"prompt negative", "AGENTQ_SEARCH_PROMPT_WEIGHTS", "0.5,-0.1,0.3,0.3", `AGENTQ_SEARCH_PROMPT_WEIGHTS: "-0.1" is not a number of 0 or more`},
		{"tool negative", "AGENTQ_SEARCH_TOOL_WEIGHTS", "-1,1,0,0", `AGENTQ_SEARCH_TOOL_WEIGHTS: "-1" is not a number of 0 or more`},
		{"prompt all zero", "AGENTQ_SEARCH_PROMPT_WEIGHTS", "0,0,0,0", "AGENTQ_SEARCH_PROMPT_WEIGHTS are all 0: want at least one above 0"},
		{"tool all zero", "AGENTQ_SEARCH_TOOL_WEIGHTS", "0, 0.0, 0, 0", "AGENTQ_SEARCH_TOOL_WEIGHTS are all 0: want at least one above 0"},
		{"three numbers", "AGENTQ_SEARCH_TOOL_WEIGHTS", "0.5,0.3,0.2", `AGENTQ_SEARCH_TOOL_WEIGHTS: "0.5,0.3,0.2": want four comma-separated numbers (similarity, quality, recency, usage)`},
		{"not a number", "AGENTQ_SEARCH_PROMPT_WEIGHTS", "0.4,high,0.2,0.1", `AGENTQ_SEARCH_PROMPT_WEIGHTS: "high" is not a number of 0 or more`},
		{"NaN", "AGENTQ_SEARCH_PROMPT_WEIGHTS", "NaN,0.3,0.2,0.1", `AGENTQ_SEARCH_PROMPT_WEIGHTS: "NaN" is not a number of 0 or more`},
		{"infinite", "AGENTQ_SEARCH_TOOL_WEIGHTS", "Inf,0,0,0", `AGENTQ_SEARCH_TOOL_WEIGHTS: "Inf" is not a number of 0 or more`},
	}
	for _, tc := range invalid {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Load(env(map[string]string{tc.key: tc.value}))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestRenderLimits(t *testing.T) {
	cfg, err := config.Load(env(nil))
	require.NoError(t, err)
	require.Equal(t, 256<<10, cfg.Search.RenderMaxOutput)
	require.Equal(t, 100_000, cfg.Search.RenderMaxSteps)
	require.Equal(t, 500*time.Millisecond, cfg.Search.RenderTimeout)
	for key, c := range map[string]struct{ value, want string }{
		"AGENTQ_SEARCH_RENDER_MAX_OUTPUT": {"100", "AGENTQ_SEARCH_RENDER_MAX_OUTPUT 100: want 1024..67108864"},
		"AGENTQ_SEARCH_RENDER_MAX_STEPS":  {"0", "AGENTQ_SEARCH_RENDER_MAX_STEPS 0: want 1000..100000000"},
		"AGENTQ_SEARCH_RENDER_TIMEOUT":    {"3s", "AGENTQ_SEARCH_RENDER_TIMEOUT 3s: want above 0 and at most AGENTQ_SEARCH_TIMEOUT (2s)"},
	} {
		_, err := config.Load(env(map[string]string{key: c.value}))
		require.ErrorContains(t, err, c.want, key)
	}
}

func TestLab(t *testing.T) {
	cfg, err := config.Load(env(nil))
	require.NoError(t, err)
	require.Equal(t, config.Lab{
		MaxQueries: 100, MaxVersions: 10, MaxRepetitions: 5, MaxRunning: 3, Concurrency: 8, Workers: 4,
		Timeout: 10 * time.Minute, CallTimeout: time.Minute, JudgeBudget: 100000,
		CandidateCount: 3, MinNegative: 5, Holdout: 0.3, FeedbackRetention: 30 * 24 * time.Hour,
	}, cfg.Lab)
	cfg, err = config.Load(env(map[string]string{"AGENTQ_LAB_MAX_QUERIES": "20", "AGENTQ_LAB_JUDGE_MODEL": "judge-1", "AGENTQ_LAB_TIMEOUT": "90s"}))
	require.NoError(t, err)
	require.Equal(t, 20, cfg.Lab.MaxQueries)
	require.Equal(t, "judge-1", cfg.Lab.JudgeModel)
	require.Equal(t, 90*time.Second, cfg.Lab.Timeout)
	for key, want := range map[string]string{
		"AGENTQ_LAB_MAX_QUERIES":           "AGENTQ_LAB_MAX_QUERIES 0: want at least 1",
		"AGENTQ_LAB_MAX_VERSIONS":          "AGENTQ_LAB_MAX_VERSIONS 0: want at least 1",
		"AGENTQ_LAB_MAX_REPETITIONS":       "AGENTQ_LAB_MAX_REPETITIONS 0: want 1..20",
		"AGENTQ_LAB_MAX_RUNNING":           "AGENTQ_LAB_MAX_RUNNING 0: want at least 1",
		"AGENTQ_LAB_CONCURRENCY":           "AGENTQ_LAB_CONCURRENCY 0: want 1..256",
		"AGENTQ_LAB_WORKERS":               "AGENTQ_LAB_WORKERS 0: want 1..64",
		"AGENTQ_LAB_TIMEOUT":               "AGENTQ_LAB_TIMEOUT must be positive",
		"AGENTQ_LAB_CALL_TIMEOUT":          "AGENTQ_LAB_CALL_TIMEOUT must be positive",
		"AGENTQ_LAB_JUDGE_BUDGET_TOKENS":   "",
		"AGENTQ_LAB_CANDIDATE_COUNT":       "AGENTQ_LAB_CANDIDATE_COUNT 0: want 1..10 and below AGENTQ_LAB_MAX_VERSIONS (10)",
		"AGENTQ_LAB_MIN_NEGATIVE_FEEDBACK": "AGENTQ_LAB_MIN_NEGATIVE_FEEDBACK 0: want at least 1",
		"AGENTQ_LAB_HOLDOUT":               "",
		"AGENTQ_LAB_FEEDBACK_RETENTION":    "",
	} {
		t.Run(key, func(t *testing.T) {
			_, err := config.Load(env(map[string]string{key: "0"}))
			if want == "" {
				require.NoError(t, err, "0 is a valid %s", key)
				return
			}
			require.ErrorContains(t, err, want)
		})
	}
	_, err = config.Load(env(map[string]string{"AGENTQ_LAB_JUDGE_BUDGET_TOKENS": "-1"}))
	require.ErrorContains(t, err, "AGENTQ_LAB_JUDGE_BUDGET_TOKENS must not be negative")
	_, err = config.Load(env(map[string]string{"AGENTQ_LAB_MAX_REPETITIONS": "21"}))
	require.ErrorContains(t, err, "AGENTQ_LAB_MAX_REPETITIONS 21: want 1..20")
	for vars, want := range map[[2]string]string{
		{"AGENTQ_LAB_CANDIDATE_COUNT", "10"}:     "AGENTQ_LAB_CANDIDATE_COUNT 10: want 1..10 and below AGENTQ_LAB_MAX_VERSIONS (10)",
		{"AGENTQ_LAB_HOLDOUT", "0.95"}:           "AGENTQ_LAB_HOLDOUT 0.95: want 0..0.9",
		{"AGENTQ_LAB_SCHEDULE", "0 2 * *"}:       "AGENTQ_LAB_SCHEDULE: expected 5 to 6 fields",
		{"AGENTQ_LAB_SCHEDULE", "@every 1h"}:     "@every is not supported",
		{"AGENTQ_LAB_SCHEDULE_PROMPTS", "a,b c"}: `AGENTQ_LAB_SCHEDULE_PROMPTS: "b c" is not a prompt id`,
		{"AGENTQ_LAB_FEEDBACK_RETENTION", "30m"}: "AGENTQ_LAB_FEEDBACK_RETENTION 30m0s: want 0 (keep forever) or at least 1h",
		{"AGENTQ_LAB_FEEDBACK_RETENTION", "30d"}: `AGENTQ_LAB_FEEDBACK_RETENTION: "30d" is not a duration like 30s or 720h`,
		{"AGENTQ_LAB_FEEDBACK_RETENTION", "-1h"}: "AGENTQ_LAB_FEEDBACK_RETENTION -1h0m0s: want 0 (keep forever) or at least 1h",
	} {
		_, err = config.Load(env(map[string]string{vars[0]: vars[1]}))
		require.ErrorContains(t, err, want, vars)
	}
	cfg, err = config.Load(env(map[string]string{"AGENTQ_LAB_SCHEDULE": " 0 2 * * * ", "AGENTQ_LAB_SCHEDULE_PROMPTS": " support-answer, triage ,"}))
	require.NoError(t, err)
	require.Equal(t, "0 2 * * *", cfg.Lab.Schedule)
	require.Equal(t, []string{"support-answer", "triage"}, config.LabSchedulePrompts(cfg.Lab.SchedulePrompts))
	sched, err := config.LabSchedule(cfg.Lab.Schedule)
	require.NoError(t, err)
	from := time.Date(2026, 11, 30, 23, 0, 0, 0, time.FixedZone("CET", 3600))
	require.Equal(t, time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC), sched.Next(from).UTC(), "UTC, whatever the zone of the time given")
	sched, err = config.LabSchedule("*/10 * * * * *")
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 12, 1, 2, 0, 10, 0, time.UTC), sched.Next(time.Date(2026, 12, 1, 2, 0, 3, 0, time.UTC)).UTC(), "seconds first")
}

func TestMCPReadOnly(t *testing.T) {
	cfg, err := config.Load(env(nil))
	require.NoError(t, err)
	require.False(t, cfg.MCPReadOnly, "write tools are offered unless turned off")
	cfg, err = config.Load(env(map[string]string{"AGENTQ_MCP_READ_ONLY": "true"}))
	require.NoError(t, err)
	require.True(t, cfg.MCPReadOnly)
	_, err = config.Load(env(map[string]string{"AGENTQ_MCP_READ_ONLY": "sometimes"}))
	require.ErrorContains(t, err, `AGENTQ_MCP_READ_ONLY: "sometimes" is not true or false`)
}

func TestIngest(t *testing.T) {
	cfg, err := config.Load(env(nil))
	require.NoError(t, err)
	require.Equal(t, config.Ingest{Addr: "127.0.0.1:8088", MaxBody: 16 << 20, MaxBatch: 1000, AckTimeout: 10 * time.Second, MaxInFlight: 64}, cfg.Ingest)
	cfg, err = config.Load(env(map[string]string{"AGENTQ_INGEST_ADDR": "off", "AGENTQ_INGEST_MAX_BATCH": "100", "AGENTQ_INGEST_ACK_TIMEOUT": "2s", "AGENTQ_INGEST_MAX_INFLIGHT": "8"}))
	require.NoError(t, err)
	require.Equal(t, config.Ingest{MaxBody: 16 << 20, MaxBatch: 100, AckTimeout: 2 * time.Second, MaxInFlight: 8}, cfg.Ingest)
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"AGENTQ_INGEST_MAX_BODY": "1000"}, "AGENTQ_INGEST_MAX_BODY 1000: want AGENTQ_MAX_PAYLOAD (1048576)"},
		{map[string]string{"AGENTQ_MAX_PAYLOAD": "33554432"}, "AGENTQ_INGEST_MAX_BODY 16777216: want AGENTQ_MAX_PAYLOAD (33554432)"},
		{map[string]string{"AGENTQ_INGEST_MAX_BATCH": "0"}, "AGENTQ_INGEST_MAX_BATCH 0: want 1..100000"},
		{map[string]string{"AGENTQ_INGEST_ACK_TIMEOUT": "0"}, "AGENTQ_INGEST_ACK_TIMEOUT must be positive"},
		{map[string]string{"AGENTQ_INGEST_MAX_INFLIGHT": "0"}, "AGENTQ_INGEST_MAX_INFLIGHT 0: want 1..4096"},
		{map[string]string{"AGENTQ_INGEST_MAX_INFLIGHT": "5000"}, "AGENTQ_INGEST_MAX_INFLIGHT 5000: want 1..4096"},
	} {
		_, err := config.Load(env(tc.env))
		require.ErrorContains(t, err, tc.want)
	}
}
