package indexer_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/library"
)

// The render limits set in the configuration reach the search service.
func TestRenderLimitsReachTheSearchService(t *testing.T) {
	cfg, err := config.Load(func(k string) string {
		return map[string]string{
			"AGENTQ_SEARCH_RENDER_MAX_OUTPUT": "4096",
			"AGENTQ_SEARCH_RENDER_MAX_STEPS":  "7777",
			"AGENTQ_SEARCH_RENDER_TIMEOUT":    "50ms",
		}[k]
	})
	require.NoError(t, err)
	require.Equal(t, library.Limits{MaxOutput: 4096, MaxSteps: 7777, Timeout: 50 * time.Millisecond}, indexer.SearchOptions(cfg.Search).Render)
}
