package search

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/service"
)

// Components are the parts of a score, each in 0..1.
type Components struct {
	Similarity float64 `json:"similarity"`
	Quality    float64 `json:"quality"`
	Recency    float64 `json:"recency"`
	Usage      float64 `json:"usage"`
}

// Retrieval tells how the candidates were found.
type Retrieval struct {
	Mode     Mode   `json:"mode"`
	Degraded bool   `json:"degraded"`
	Reason   string `json:"reason,omitempty"`
}

func pow2(x float64) float64 { return math.Exp2(x) }

// clamp01 keeps a component in 0..1 whatever the read model holds.
func clamp01(x float64) float64 {
	switch {
	case x != x || x < 0:
		return 0
	case x > 1:
		return 1
	}
	return x
}

// usage is log(1+calls)/log(1+most): a few calls count, and the most used
// candidate does not flatten every other.
func usage(calls, most int64) float64 {
	if most <= 0 || calls <= 0 {
		return 0
	}
	return clamp01(math.Log1p(float64(calls)) / math.Log1p(float64(most)))
}

// candidate is what assembly sorts: its score, then a stable key.
type candidate struct {
	score   float64
	tenant  string
	name    string // prompt id or tool name
	version int
}

// better orders by score, then by name, tenant and version, so equal
// scores come out in the same order every time.
func better(a, b candidate) int {
	if c := cmp.Compare(b.score, a.score); c != 0 {
		return c
	}
	if c := cmp.Compare(a.name, b.name); c != 0 {
		return c
	}
	if c := cmp.Compare(a.tenant, b.tenant); c != 0 {
		return c
	}
	return cmp.Compare(b.version, a.version)
}

// maxQuery is the longest query accepted, in characters (the schemas').
const maxQuery = 2000

func checkTenant(tenant string) error {
	if !bus.ValidTenant(tenant) {
		return service.BadRequest("tenant %q does not match [a-z0-9_-]{1,64}", truncate(tenant, 80))
	}
	return nil
}

func checkQuery(q string) (string, error) {
	if err := checkText("query", q); err != nil {
		return "", err
	}
	if strings.TrimSpace(q) == "" {
		return "", service.BadRequest("query is required: what the result should do, in plain language")
	}
	if n := utf8.RuneCountInString(q); n > maxQuery {
		return "", service.BadRequest("query has %d characters; at most %d", n, maxQuery)
	}
	return strings.TrimSpace(q), nil
}

// checkText refuses text Postgres cannot hold, which would otherwise fail
// the statement as an internal error: a NUL, or bytes that are not UTF-8
// (JSON decoding replaces those, a direct caller may not).
func checkText(what, s string) error {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return service.BadRequest("%s holds a NUL character", what)
	case !utf8.ValidString(s):
		return service.BadRequest("%s is not valid UTF-8", what)
	}
	return nil
}

// checkTexts is checkText over each of list.
func checkTexts(what string, list []string) error {
	for _, s := range list {
		if err := checkText(what, s); err != nil {
			return err
		}
	}
	return nil
}

func checkLimit(limit, def, most int) (int, error) {
	switch {
	case limit == 0:
		return def, nil
	case limit < 1 || limit > most:
		return 0, service.BadRequest("limit %d is out of range 1..%d", limit, most)
	}
	return limit, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// evidence is what the re-rank knows of one retrieved candidate, whatever
// its kind.
type evidence struct {
	f       fused
	cos     *float64 // nil: no vector of the query's model
	quality *float64 // nil: no figures yet
	calls   int64
	// times are when it was created or registered, last used or last
	// succeeded: the nearest to now gives its recency.
	times []time.Time
}

// rerank is stage 2 of the pipeline for candidates of one kind: each
// candidate's components and score (similarity from its retrieval,
// quality or the neutral value, recency, usage relative to the most used)
// and the order of the best limit of them, best first, ties broken by
// key so equal scores come out the same every time.
func (s *Searcher) rerank(mode Mode, tune tuning, w Weights, ev []evidence, key func(i int) candidate, limit int) (comps []Components, scores []float64, order []int) {
	now := time.Now()
	var most int64
	var bestL float64 // the best BM25 among the candidates
	for _, x := range ev {
		most = max(most, x.calls)
		if x.f.lrank != nil {
			bestL = max(bestL, *x.f.lrank)
		}
	}
	comps, scores = make([]Components, len(ev)), make([]float64, len(ev))
	keys := make([]candidate, len(ev))
	for i, x := range ev {
		c := Components{Similarity: tune.similarity(mode, x.cos, x.f, bestL), Quality: s.opts.NeutralQuality, Usage: usage(x.calls, most)}
		if x.quality != nil {
			c.Quality = clamp01(*x.quality)
		}
		for _, t := range x.times {
			c.Recency = max(c.Recency, recency(t, now, s.opts.HalfLife))
		}
		comps[i], scores[i] = c, w.score(c)
		keys[i] = key(i)
		keys[i].score = scores[i]
	}
	order = make([]int, len(ev))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return better(keys[a], keys[b]) })
	return comps, scores, order[:min(limit, len(order))]
}
