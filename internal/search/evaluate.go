package search

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/embed"
	"github.com/agentq/agentq/internal/embed/eval"
	"github.com/agentq/agentq/internal/library"
	"github.com/agentq/agentq/internal/registry"
)

// What agentq eval retrieval measures: a labelled corpus loaded into a
// scratch tenant, searched through the real statements.

// EvalDoc is one document of an evaluation corpus. It reads the format of
// internal/embed/testdata (id and text) and optional richer fields: for a
// tool, text is "name: description" or the description (description wins
// when given); for a prompt, text is the content (content wins), the name
// defaults to the id and the type to custom.
type EvalDoc struct {
	ID          string   `json:"id"`
	Text        string   `json:"text"`
	Name        string   `json:"name,omitempty"`
	Description string   `json:"description,omitempty"`
	Content     string   `json:"content,omitempty"`
	Type        string   `json:"type,omitempty"`
	Tags        []string `json:"tags,omitempty"`
}

// EvalSet is a corpus and its queries, eval.Set's JSON with EvalDocs.
type EvalSet struct {
	Name    string       `json:"name"`
	Docs    []EvalDoc    `json:"docs"`
	Queries []eval.Query `json:"queries"`
}

// LoadEvalSet reads corpus, and queries from queriesPath when not empty
// (else from the corpus file), and checks the whole with eval.Set's rules.
func LoadEvalSet(corpusPath, queriesPath string) (EvalSet, error) {
	var s EvalSet
	if err := readJSON(corpusPath, &s); err != nil {
		return s, err
	}
	if queriesPath != "" {
		var q EvalSet
		if err := readJSON(queriesPath, &q); err != nil {
			return s, err
		}
		s.Queries = q.Queries
	}
	if len(s.Docs) == 0 || len(s.Queries) == 0 {
		return s, fmt.Errorf("evaluation set %s: %d docs and %d queries; both are needed", corpusPath, len(s.Docs), len(s.Queries))
	}
	return s, s.set().Validate()
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func (s EvalSet) set() eval.Set {
	out := eval.Set{Name: s.Name, Queries: s.Queries}
	for _, d := range s.Docs {
		out.Docs = append(out.Docs, eval.Doc{ID: d.ID, Text: d.Text})
	}
	return out
}

// Set returns s as an eval.Set.
func (s EvalSet) Set() eval.Set { return s.set() }

// EvalKind is what a corpus holds.
type EvalKind string

// Kinds of corpus.
const (
	EvalTools   EvalKind = "tools"
	EvalPrompts EvalKind = "prompts"
)

// LoadCorpus stores s's documents as tenant's prompts or tools, embedded
// with emb (nil: not embedded) the way the indexer embeds them.
func LoadCorpus(ctx context.Context, db library.DB, tenant string, kind EvalKind, s EvalSet, emb embed.Embedder) error {
	at := time.Now().Add(-time.Hour)
	var texts []string
	var prompts []library.Prompt
	var tools []registry.Tool
	for _, d := range s.Docs {
		switch kind {
		case EvalTools:
			desc := d.Description
			if desc == "" {
				desc = strings.TrimSpace(strings.TrimPrefix(d.Text, d.ID+":"))
			}
			h, err := registry.Hash(d.ID, desc, nil, "", d.Tags)
			if err != nil {
				return err
			}
			t := registry.Tool{Tenant: tenant, Name: d.ID, Version: 1, Hash: h, Description: desc, Tags: d.Tags, RegisteredAt: at}
			tools = append(tools, t)
			name := strings.NewReplacer("_", " ", ".", " ", "-", " ").Replace(t.Name)
			texts = append(texts, joinText(name, t.Description, strings.Join(t.Tags, " ")))
		case EvalPrompts:
			p := library.Prompt{Tenant: tenant, ID: d.ID, Version: 1, Type: d.Type, Name: d.Name, Description: d.Description,
				Content: d.Content, Tags: d.Tags, CreatedAt: at}
			if p.Content == "" {
				p.Content = d.Text
			}
			if p.Name == "" {
				p.Name = d.ID
			}
			if p.Type == "" {
				p.Type = "custom"
			}
			p.Hash = library.Hash(p.ID, p.Version, p.Content, p.Type)
			prompts = append(prompts, p)
			texts = append(texts, joinText(p.Name, p.Description, strings.Join(p.Tags, " "), p.Content))
		default:
			return fmt.Errorf("unknown corpus kind %q", kind)
		}
	}
	var vecs [][]float32
	model := ""
	if emb != nil {
		var err error
		if vecs, err = emb.Embed(ctx, texts); err != nil {
			return fmt.Errorf("embed %d documents with %s: %w", len(texts), emb.Model(), err)
		}
		model = emb.Model()
	}
	vec := func(i int) []float32 {
		if vecs == nil {
			return nil
		}
		return vecs[i]
	}
	for i, p := range prompts {
		if _, err := library.Insert(ctx, db, library.Row{Prompt: p, EventID: fmt.Sprint("eval-", i), StreamSeq: uint64(i + 1),
			Embedding: vec(i), Model: model}); err != nil {
			return err
		}
	}
	for i, t := range tools {
		if err := registry.Put(ctx, db, registry.Row{Tool: t, EventID: fmt.Sprint("eval-", i), StreamSeq: uint64(i + 1),
			Embedding: vec(i), Model: model}); err != nil {
			return err
		}
	}
	_, err := FoldStats(ctx, db)
	return err
}

// joinText is the indexer's: the parts, trimmed, joined by ". ".
func joinText(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(". ")
		}
		b.WriteString(p)
	}
	return b.String()
}

// ErrDegraded is returned by a RankFunc of Rank when the search fell back
// from the mode asked for (the embedder failed): its figures would be the
// lexical arm's.
var ErrDegraded = errors.New("search degraded")

// Rank returns an eval.RankFunc that searches tenant's corpus of kind
// through s, returning at most depth ids of tenant's own rows (rows of
// _global are left out).
func (s *Searcher) Rank(tenant string, kind EvalKind, depth int) eval.RankFunc {
	return func(ctx context.Context, query string) ([]string, error) {
		var ids []string
		var r Retrieval
		switch kind {
		case EvalTools:
			resp, err := s.Tools(ctx, tenant, ToolsRequest{Query: query, Limit: min(depth, MaxToolLimit)})
			if err != nil {
				return nil, err
			}
			for _, x := range resp.Results {
				if x.Tool.Tenant == tenant {
					ids = append(ids, x.Tool.Name)
				}
			}
			r = resp.Retrieval
		default:
			resp, err := s.Prompts(ctx, tenant, PromptsRequest{Query: query, Limit: min(depth, MaxPromptLimit)})
			if err != nil {
				return nil, err
			}
			for _, x := range resp.Results {
				if x.Prompt.Tenant == tenant {
					ids = append(ids, x.Prompt.ID)
				}
			}
			r = resp.Retrieval
		}
		if r.Degraded {
			return nil, fmt.Errorf("%w: %s", ErrDegraded, r.Reason)
		}
		return ids, nil
	}
}
