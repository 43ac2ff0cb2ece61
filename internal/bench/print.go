package bench

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// promptIndex says which index prompt search ran against.
func promptIndex(r IndexerResult) string {
	if r.PromptIndex != "ivfflat" {
		return r.PromptIndex
	}
	s := fmt.Sprintf("ivfflat, %d lists, probes %d", r.PromptLists, r.Probes)
	if rb := r.PromptRebuild; rb != nil {
		s += fmt.Sprintf(" (rebuilt for %d rows from %d lists before search, in %.1f s)", rb.Rows, rb.From, rb.Seconds)
	}
	return s
}

// Print writes r as the table `agentq bench indexer` prints: the figures
// beside their anchors, then the verdicts on issue 8's targets.
func (r IndexerResult) Print(w io.Writer) {
	ix := r.Indexing
	fmt.Fprintf(w, `agentq bench indexer: %d prompts (%d ids, %.0f words on average), %d tools; tenant %s
  database: %s
  server: %s, pgvector %s, pool of %d connections, batch %d, indexer copies %d of %d writers each
  models: prompts %s, tools %s; prompt K %d, tool K %d, ef_search %d, full-text candidates %d
  prompts' vector index: %s

%sindexing (events applied per second)
  publish, async with acks (indexer stopped)        %9.0f /s
  prompts: indexer draining the backlog             %9.0f /s   (first publish → last prompt.indexed: %.0f /s)
    embedder alone (%s, %d texts)%s %9.0f /s
    bare INSERT, no vectors (anchor, %d rows)%s %9.0f /s
    bare INSERT with vectors (index maintained)     %9.0f /s
  tools: indexer draining the backlog               %9.0f /s
    embedder alone (%s, %d texts)%s %9.0f /s
    bare INSERT, no vectors (anchor, %d rows)%s %9.0f /s
    bare INSERT with vectors (HNSW maintained)      %9.0f /s
  rejected: %d
`, r.Prompts, r.PromptIDs, r.PromptWords, r.Tools, r.Tenant, r.Database, r.Server, r.PGVector, r.PoolMaxConns, r.BatchSize, r.Copies, r.Writers,
		r.PromptModel, r.ToolModel, r.PromptK, r.ToolK, r.EFSearch, r.LexicalCandidates, promptIndex(r), skipped(r.SearchOnly),
		ix.Publish, ix.Prompts, ix.PromptsWall,
		r.PromptModel, ix.PromptEmbedSamples, pad(r.PromptModel, ix.PromptEmbedSamples), ix.PromptsEmbed,
		ix.AnchorPrompts, padTo(fmt.Sprintf("    bare INSERT, no vectors (anchor, %d rows)", ix.AnchorPrompts)), ix.PromptsInsert, ix.PromptsInsertVectors, ix.Tools,
		r.ToolModel, ix.ToolEmbedSamples, pad(r.ToolModel, ix.ToolEmbedSamples), ix.ToolsEmbed,
		ix.AnchorTools, padTo(fmt.Sprintf("    bare INSERT, no vectors (anchor, %d rows)", ix.AnchorTools)), ix.ToolsInsert, ix.ToolsInsertVectors, ix.Rejected)
	fmt.Fprintf(w, "\nsearch and get through NATS request/reply (separate connection), %d requests per measurement, medians of %d rounds\n", r.Requests, r.Rounds)
	fmt.Fprintf(w, "  %-4s %-36s %9s %9s %9s %10s %7s\n", "conc", "measurement", "p50 ms", "p99 ms", "max ms", "per s", "errors")
	for _, s := range r.Search {
		c := s.label()
		for _, m := range []struct {
			name string
			l    Latency
		}{
			{"search.prompts (NATS)", s.SearchPrompts}, {"  embedder alone, one new query", s.EmbedPrompts}, {"  bare SQL kNN, prompts", s.KNNPrompts}, {"  bare full-text arm, prompts", s.FullTextPrompts},
			{"  bare arms at once, prompts", s.ArmsPrompts},
			{"search.tools (NATS)", s.SearchTools}, {"  embedder alone, one new query", s.EmbedTools}, {"  bare SQL kNN, tools", s.KNNTools}, {"  bare full-text arm, tools", s.FullTextTools},
			{"  bare arms at once, tools", s.ArmsTools},
			{"prompts.get (NATS)", s.Get}, {"  bare SQL of prompts.get", s.GetSQL}, {"prompts.get with params (NATS)", s.GetParams},
			{fmt.Sprintf("prompts.get, %d hot ids (NATS)", r.HotIDs), s.GetHot},
			{"  bare NATS request/reply, same size", s.Echo},
		} {
			fmt.Fprintf(w, "  %-4s %-36s %9.2f %9.2f %9.2f %10.0f %7d\n", c, m.name, m.l.P50, m.l.P99, m.l.Max, m.l.Rate, m.l.Errors)
		}
		fmt.Fprintf(w, "  %-4s search / bare kNN: prompts p50 %.1f×, p99 %.1f×; tools p50 %.1f×, p99 %.1f×\n",
			c, s.PromptsRatioP50, s.PromptsRatioP99, s.ToolsRatioP50, s.ToolsRatioP99)
		fmt.Fprintf(w, "  %-4s search / bare arms at once: prompts p50 %.1f×, p99 %.1f×; tools p50 %.1f×, p99 %.1f×\n",
			c, s.PromptsArmsRatioP50, s.PromptsArmsRatioP99, s.ToolsArmsRatioP50, s.ToolsArmsRatioP99)
		fmt.Fprintf(w, "  %-4s searches with no result: prompts %d, tools %d; answered degraded: prompts %d, tools %d\n",
			c, s.EmptyPrompts, s.EmptyTools, s.DegradedPrompts, s.DegradedTools)
	}
	if len(r.Search) > 0 && r.Search[len(r.Search)-1].Load > 0 {
		fmt.Fprintf(w, "  (%s: open loop at that share of each row's throughput at the highest concurrency, timed from when each request was due)\n", r.Search[len(r.Search)-1].label())
	}
	fmt.Fprintf(w, "  kNN recall@K against an exact scan (%d queries each): prompts@%d %.3f, tools@%d %.3f\n",
		r.Recall.Queries, r.PromptK, r.Recall.Prompts, r.ToolK, r.Recall.Tools)
	fmt.Fprintf(w, "\ntargets (issue 8): search p99 ≤ 10 ms, prompts.get p99 ≤ 2 ms, indexing ≥ 1,000 prompts/s\n")
	if !r.SearchOnly {
		fmt.Fprintf(w, "  indexing %.0f prompts/s: %s\n", ix.Prompts, verdict(ix.Prompts >= 1000))
	}
	for _, s := range r.Search {
		where := fmt.Sprintf("concurrency %d", s.Concurrency)
		if s.Load > 0 {
			where = fmt.Sprintf("open loop at %.0f%% of capacity", 100*s.Load)
		}
		// Each verdict with its anchor's p99: a target the bare
		// database work already misses is the machine's, not agentq's.
		fmt.Fprintf(w, "  %s: search.prompts p99 %.2f ms %s (bare arms at once %.2f); search.tools p99 %.2f ms %s (bare arms at once %.2f); prompts.get p99 %.2f ms %s (bare statement %.2f), with params %.2f ms %s, hot ids %.2f ms %s\n",
			where, s.SearchPrompts.P99, verdict(s.SearchPrompts.P99 <= 10), s.ArmsPrompts.P99, s.SearchTools.P99, verdict(s.SearchTools.P99 <= 10), s.ArmsTools.P99,
			s.Get.P99, verdict(s.Get.P99 <= 2), s.GetSQL.P99, s.GetParams.P99, verdict(s.GetParams.P99 <= 2), s.GetHot.P99, verdict(s.GetHot.P99 <= 2))
	}
}

// label is s's load in the table: its concurrency, or the open loop's
// share of capacity.
func (s SearchFigures) label() string {
	if s.Load > 0 {
		return fmt.Sprintf("%.0f%%", 100*s.Load)
	}
	return strconv.Itoa(s.Concurrency)
}

// pad and padTo align the lines whose labels vary in length.
func pad(model string, n int) string {
	return padTo(fmt.Sprintf("    embedder alone (%s, %d texts)", model, n))
}

func padTo(label string) string { return strings.Repeat(" ", max(1, 52-len(label))) }

func skipped(searchOnly bool) string {
	if searchOnly {
		return "(--search-only: indexing was not run; its figures are zero)\n"
	}
	return ""
}

func verdict(ok bool) string {
	if ok {
		return "meets"
	}
	return "MISSES"
}
