package search_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentq/agentq/internal/search"
	"github.com/agentq/agentq/internal/service"
	"github.com/agentq/agentq/internal/testenv"
)

// FuzzSearchQuery: whatever text a client sends as a query (and as a tag
// or an excluded name), search answers with results or a bad_request,
// never an internal error, in every retrieval mode. It keeps closed the
// class of queries that broke a statement: a NUL, bytes that are not
// UTF-8, a run of "-" deeper than websearch_to_tsquery's stack.
func FuzzSearchQuery(f *testing.F) {
	for _, q := range []string{
		"refund a card payment",
		"\x00",
		"guide \xff",
		"# " + strings.Repeat("-", 80) + " # PLATFORM SUPPORT GUIDE",
		strings.Repeat("- ", 40) + "x",
		strings.Repeat("-!", 40) + "x",
		strings.Repeat("-<", 40) + "x",
		strings.Repeat("-\"", 40) + "x",
		strings.Repeat("-", 20) + `"` + strings.Repeat("-", 20) + "x",
		"use --verbose -- and ---",
		`"refund payment" -card or "invoice"`,
		`'\ '' \\ :* & | ! <-> <2>`,
		"?? !!",
		strings.Repeat("x ", 999),
		strings.Repeat("é", 2000),
	} {
		f.Add(q)
	}
	ctx := context.Background()
	fx := newFixture(f, lexical, search.Options{})
	s, tenant := fx.s, testenv.Tenant(f)
	// Rows for both arms to rank, of the tenant and _global.
	for i, text := range []string{"Refund a card payment", "Platform support guide", "Summarise a meeting transcript"} {
		id := fmt.Sprintf("fuzz-%d", i)
		fx.prompt(promptSpec{tenant: tenant, id: id, content: text})
		fx.tool(tenant, strings.ReplaceAll(id, "-", "_"), text, time.Time{})
	}

	f.Fuzz(func(t *testing.T, q string) {
		for _, mode := range []search.Mode{search.Hybrid, search.Lexical, search.Vector} {
			m := s.WithMode(mode)
			_, err := m.Prompts(ctx, tenant, search.PromptsRequest{Query: q, Tags: tagsOf(q)})
			answered(t, mode, "prompts", q, err)
			_, err = m.Tools(ctx, tenant, search.ToolsRequest{Query: q, ExcludeNames: []string{q}})
			answered(t, mode, "tools", q, err)
		}
	})
}

// tagsOf is q as a tag filter, when it is short enough to be one.
func tagsOf(q string) []string {
	if len(q) > 64 {
		return nil
	}
	return []string{q}
}

func answered(t *testing.T, mode search.Mode, what, q string, err error) {
	t.Helper()
	var se *service.Error
	if err != nil && (!errors.As(err, &se) || se.Code != service.CodeBadRequest) {
		t.Fatalf("%s search %s for %.80q: %v (want results or bad_request)", mode, what, q, err)
	}
}
