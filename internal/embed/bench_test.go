package embed_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/agentq/agentq/internal/embed"
)

// benchTexts returns n distinct texts of about words words each, drawn
// from a fixed vocabulary so that runs are comparable.
func benchTexts(n, words int) []string {
	vocab := strings.Fields(`review the pull request for data races leaking goroutines and unchecked errors then
		summarise the meeting transcript with decisions owners and due dates translate the question into a
		postgres query using only columns from the schema reply to the customer whose order arrived damaged
		offer a refund or replacement plan a travel itinerary within budget using public transport`)
	out := make([]string, n)
	for i := range out {
		var b strings.Builder
		for w := range words {
			if w > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(vocab[(i*7+w*13+w*w)%len(vocab)])
		}
		fmt.Fprintf(&b, " item%d", i)
		out[i] = b.String()
	}
	return out
}

// BenchmarkLexical reports texts/s for short (~12-word, a tool
// description or a query) and long (~130-word, a prompt) texts, in
// batches of 64 as the indexer sends them.
func BenchmarkLexical(b *testing.B) {
	for _, size := range []struct {
		name  string
		words int
	}{{"short-12w", 11}, {"long-130w", 129}} {
		b.Run(size.name, func(b *testing.B) {
			texts := benchTexts(64, size.words)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := (embed.Lexical{}).Embed(ctx, texts); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*len(texts))/b.Elapsed().Seconds(), "texts/s")
		})
	}
}
