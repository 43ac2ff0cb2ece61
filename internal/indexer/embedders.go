package indexer

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/provider"
)

// OpenEmbedders returns the models in force from cfg: the configured
// OpenAI-compatible provider for prompts and tools when AGENTQ_EMBED_BASE_URL
// is set, else the built-in offline embedders. The returned func releases
// them.
func OpenEmbedders(ctx context.Context, cfg config.Config, log zerolog.Logger) (Embedders, func(), error) {
	if cfg.Embed.BaseURL != "" {
		retries := cfg.Embed.MaxRetries
		if retries == 0 {
			retries = -1 // provider: 0 means its default, negative none
		}
		e, err := embed.New(provider.EmbedOptions{Options: provider.Options{
			BaseURL: cfg.Embed.BaseURL, Model: cfg.Embed.Model, APIKey: cfg.Embed.APIKey,
			MaxRPS: cfg.Embed.MaxRPS, MaxRetries: retries,
		}})
		if err != nil {
			return Embedders{}, nil, fmt.Errorf("embeddings provider: %w", err)
		}
		log.Info().Str("model", e.Model()).Msg("embedding prompts and tools with the configured provider")
		return Embedders{Prompts: e, Tools: e}, func() {}, nil
	}
	lex := embed.Lexical{}
	log.Info().Str("model", lex.Model()).Msg("embedding prompts and tools with the built-in offline lexical embedder")
	return Embedders{Prompts: lex, Tools: lex}, func() {}, nil
}
