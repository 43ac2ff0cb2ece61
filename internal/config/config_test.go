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
	require.Equal(t, 500, cfg.BatchSize)
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

// The README's configuration table lists every variable with its default.
func TestREADMEDocumentsEveryVariable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	readme := string(b)
	for _, v := range config.Vars {
		def := "(empty)"
		if v.Default != "" {
			def = "`" + v.Default + "`"
		}
		require.True(t, strings.Contains(readme, "| `"+v.Name+"` | "+def+" |"), "README lacks a row for %s with default %s", v.Name, def)
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

	_, err = config.Load(env(map[string]string{"AGENTQ_SCORER_BATCH_SIZE": "0"}))
	require.ErrorContains(t, err, "AGENTQ_SCORER_BATCH_SIZE 0: want 1..10000")
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
