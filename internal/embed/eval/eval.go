// Package eval measures how well a retrieval method ranks a labelled set:
// documents with ids, and queries with the ids of the documents relevant
// to each. It reports recall@k and nDCG@10 with binary relevance, the
// figures the indexer uses to choose between embedders and between its
// lexical-only, vector-only and hybrid arms.
//
// The method under test is a RankFunc, so anything that orders ids can be
// measured; Cosine builds one from an embed.Embedder and RRF fuses
// several, as hybrid retrieval does.
package eval

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"

	"github.com/agentq/agentq/internal/embed"
)

// Doc is one retrievable text.
type Doc struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// Query is a search and the ids of the documents that answer it.
type Query struct {
	Text     string   `json:"text"`
	Relevant []string `json:"relevant"`
}

// Set is a labelled corpus, as stored in JSON files under testdata.
type Set struct {
	Name    string  `json:"name"`
	Docs    []Doc   `json:"docs"`
	Queries []Query `json:"queries"`
}

// Load reads a Set from a JSON file and checks it.
func Load(path string) (Set, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Set{}, err
	}
	var s Set
	if err := json.Unmarshal(data, &s); err != nil {
		return Set{}, fmt.Errorf("evaluation set %s: %w", path, err)
	}
	if err := s.Validate(); err != nil {
		return Set{}, fmt.Errorf("evaluation set %s: %w", path, err)
	}
	return s, nil
}

// Validate checks that ids are unique and not empty, and that every query
// has text and relevant ids that exist.
func (s Set) Validate() error {
	var errs []error
	ids := make(map[string]bool, len(s.Docs))
	for i, d := range s.Docs {
		switch {
		case d.ID == "":
			errs = append(errs, fmt.Errorf("doc %d has no id", i))
		case ids[d.ID]:
			errs = append(errs, fmt.Errorf("doc id %q is repeated", d.ID))
		}
		ids[d.ID] = true
	}
	for i, q := range s.Queries {
		if q.Text == "" {
			errs = append(errs, fmt.Errorf("query %d has no text", i))
		}
		if len(q.Relevant) == 0 {
			errs = append(errs, fmt.Errorf("query %d (%q) has no relevant ids", i, q.Text))
		}
		for _, id := range q.Relevant {
			if !ids[id] {
				errs = append(errs, fmt.Errorf("query %d (%q) names unknown doc %q", i, q.Text, id))
			}
		}
	}
	return errors.Join(errs...)
}

// RankFunc returns document ids, best first, for a query. It may return
// fewer ids than there are documents (a top-k cut); the missing ones count
// as not retrieved.
type RankFunc func(ctx context.Context, query string) ([]string, error)

// Cosine embeds docs once with e and returns a RankFunc that orders every
// document by cosine similarity to the query's vector, ties by id so the
// order is deterministic.
func Cosine(ctx context.Context, e embed.Embedder, docs []Doc) (RankFunc, error) {
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.Text
	}
	vecs, err := e.Embed(ctx, texts)
	if err != nil {
		return nil, fmt.Errorf("embed %d documents: %w", len(docs), err)
	}
	return func(ctx context.Context, query string) ([]string, error) {
		qv, err := e.Embed(ctx, []string{query})
		if err != nil {
			return nil, fmt.Errorf("embed query: %w", err)
		}
		type scored struct {
			id    string
			score float64
		}
		all := make([]scored, len(docs))
		for i, d := range docs {
			all[i] = scored{d.ID, embed.Cosine(qv[0], vecs[i])}
		}
		slices.SortFunc(all, func(a, b scored) int {
			if c := cmp.Compare(b.score, a.score); c != 0 {
				return c
			}
			return cmp.Compare(a.id, b.id)
		})
		ids := make([]string, len(all))
		for i, s := range all {
			ids[i] = s.id
		}
		return ids, nil
	}, nil
}

// Recall returns the share of relevant ids found in the first k of
// ranked: |relevant ∩ ranked[:k]| / |relevant|, 0 when nothing is
// relevant. A repeated id in ranked counts once.
func Recall(ranked, relevant []string, k int) float64 {
	if len(relevant) == 0 {
		return 0
	}
	rel := set(relevant)
	hits := 0
	for _, id := range top(ranked, k) {
		if rel[id] {
			hits++
			delete(rel, id)
		}
	}
	return float64(hits) / float64(len(set(relevant)))
}

// NDCG returns the normalised discounted cumulative gain of the first k of
// ranked with binary relevance: DCG = Σ 1/log2(i+1) over the 1-based ranks
// i ≤ k that hold a relevant id, divided by the DCG of an ideal ranking
// (all relevant ids first). It is 1 for a perfect ranking, 0 when no
// relevant id is in the first k.
func NDCG(ranked, relevant []string, k int) float64 {
	rel := set(relevant)
	if len(rel) == 0 || k <= 0 {
		return 0
	}
	var dcg float64
	for i, id := range top(ranked, k) {
		if rel[id] {
			dcg += 1 / math.Log2(float64(i+2))
			delete(rel, id)
		}
	}
	var ideal float64
	for i := range min(len(set(relevant)), k) {
		ideal += 1 / math.Log2(float64(i+2))
	}
	return dcg / ideal
}

// MRR returns the reciprocal rank of the first relevant id in ranked, 0 if
// none.
func MRR(ranked, relevant []string) float64 {
	rel := set(relevant)
	for i, id := range ranked {
		if rel[id] {
			return 1 / float64(i+1)
		}
	}
	return 0
}

func top(ranked []string, k int) []string {
	return ranked[:max(0, min(k, len(ranked)))]
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}

// Result is one query's outcome.
type Result struct {
	Query string
	// Ranked is the first 10 ids ranked.
	Ranked []string
	// RecallN is recall@N, NDCG10 nDCG@10, MRR the reciprocal rank.
	Recall1, Recall5, Recall10, NDCG10, MRR float64
}

// Report is the mean of each measure over a set's queries.
type Report struct {
	Set     string
	Queries int
	// Means over queries.
	Recall1, Recall5, Recall10, NDCG10, MRR float64
	// Results holds each query's outcome, in the set's order.
	Results []Result
}

func (r Report) String() string {
	return fmt.Sprintf("%s: %d queries, recall@1 %.3f, recall@5 %.3f, recall@10 %.3f, nDCG@10 %.3f, MRR %.3f",
		r.Set, r.Queries, r.Recall1, r.Recall5, r.Recall10, r.NDCG10, r.MRR)
}

// Evaluate ranks every query of s with rank and averages the measures.
func Evaluate(ctx context.Context, s Set, rank RankFunc) (Report, error) {
	rep := Report{Set: s.Name, Queries: len(s.Queries)}
	for _, q := range s.Queries {
		ranked, err := rank(ctx, q.Text)
		if err != nil {
			return Report{}, fmt.Errorf("query %q: %w", q.Text, err)
		}
		r := Result{
			Query:    q.Text,
			Ranked:   slices.Clone(top(ranked, 10)),
			Recall1:  Recall(ranked, q.Relevant, 1),
			Recall5:  Recall(ranked, q.Relevant, 5),
			Recall10: Recall(ranked, q.Relevant, 10),
			NDCG10:   NDCG(ranked, q.Relevant, 10),
			MRR:      MRR(ranked, q.Relevant),
		}
		rep.Results = append(rep.Results, r)
		rep.Recall1 += r.Recall1
		rep.Recall5 += r.Recall5
		rep.Recall10 += r.Recall10
		rep.NDCG10 += r.NDCG10
		rep.MRR += r.MRR
	}
	if n := float64(len(s.Queries)); n > 0 {
		rep.Recall1 /= n
		rep.Recall5 /= n
		rep.Recall10 /= n
		rep.NDCG10 /= n
		rep.MRR /= n
	}
	return rep, nil
}

// RRF fuses rankings by reciprocal rank, as the indexer's hybrid retrieval
// does in SQL: a document's score is the sum over the rankings that
// contain it of 1/(k + rank), rank counted from 1; ties go by id. k = 60
// is the usual constant (Cormack et al., 2009). The rankers run one after
// another; the first error is returned.
func RRF(k int, rankers ...RankFunc) RankFunc {
	return func(ctx context.Context, query string) ([]string, error) {
		scores := map[string]float64{}
		for i, rank := range rankers {
			ranked, err := rank(ctx, query)
			if err != nil {
				return nil, fmt.Errorf("ranking %d of %d: %w", i+1, len(rankers), err)
			}
			seen := map[string]bool{}
			for r, id := range ranked {
				if !seen[id] {
					seen[id] = true
					scores[id] += 1 / float64(k+r+1)
				}
			}
		}
		ids := make([]string, 0, len(scores))
		for id := range scores {
			ids = append(ids, id)
		}
		slices.SortFunc(ids, func(a, b string) int {
			if c := cmp.Compare(scores[b], scores[a]); c != 0 {
				return c
			}
			return cmp.Compare(a, b)
		})
		return ids, nil
	}
}
