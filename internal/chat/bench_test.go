package chat_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/agentq/agentq/internal/chat"
)

// renderRating is what the rater does per tool call before sending: build
// the messages, put them in a conversation and render the request body.
func renderRating(b *chat.Builder) ([]chat.OpenAIMessage, error) {
	msgs, err := b.RatingMessages(ratingInput)
	if err != nil {
		return nil, err
	}
	return chat.New("gpt-4o-mini").WithTemperature(0).Append(msgs...).OpenAIMessages(), nil
}

func BenchmarkRatingPrompt(b *testing.B) {
	builder := testBuilder()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := renderRating(builder); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRatingPromptJSON adds marshalling the request body.
func BenchmarkRatingPromptJSON(b *testing.B) {
	builder := testBuilder()
	b.ReportAllocs()
	for b.Loop() {
		msgs, err := builder.RatingMessages(ratingInput)
		if err != nil {
			b.Fatal(err)
		}
		req := chat.New("gpt-4o-mini").WithTemperature(0).Append(msgs...).OpenAIRequest()
		if _, err := json.Marshal(req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRatingPromptLatency times every iteration of renderRating and
// reports the median, 99th percentile and maximum as p50-ns, p99-ns and
// max-ns; the target is p99 at or under 50µs.
func BenchmarkRatingPromptLatency(b *testing.B) {
	builder := testBuilder()
	var durations []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := renderRating(builder); err != nil {
			b.Fatal(err)
		}
		durations = append(durations, time.Since(start))
	}
	slices.Sort(durations)
	at := func(q float64) float64 { return float64(durations[int(q*float64(len(durations)-1))].Nanoseconds()) }
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
	b.ReportMetric(at(1), "max-ns")
}

func BenchmarkJudgePrompt(b *testing.B) {
	builder := testBuilder()
	b.ReportAllocs()
	for b.Loop() {
		msgs, err := builder.JudgeMessages(judgeInput)
		if err != nil {
			b.Fatal(err)
		}
		_ = chat.New("gpt-4.1").Append(msgs...).OpenAIMessages()
	}
}

// BenchmarkCountTokens measures counting throughput on a rendered rating
// prompt, in MB/s and tokens/s.
func BenchmarkCountTokens(b *testing.B) {
	msgs, err := testBuilder().RatingMessages(ratingInput)
	if err != nil {
		b.Fatal(err)
	}
	text := msgs[0].Content() + "\n" + msgs[1].Content()
	o200k, err := chat.NewBPECounter(chat.O200kBase)
	if err != nil {
		b.Fatal(err)
	}
	cl100k, err := chat.NewBPECounter(chat.Cl100kBase)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		counter chat.TokenCounter
	}{
		{"o200k_base", o200k},
		{"cl100k_base", cl100k},
		{"approx", chat.ApproxCounter{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			tokens := 0
			for b.Loop() {
				tokens += c.counter.CountTokens(text)
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkTokenCountCached shows a repeated TokenCount is a cache hit.
func BenchmarkTokenCountCached(b *testing.B) {
	msgs, err := testBuilder().RatingMessages(ratingInput)
	if err != nil {
		b.Fatal(err)
	}
	c := chat.New("gpt-4o").Append(msgs...)
	_ = c.TokenCount()
	b.ReportAllocs()
	for b.Loop() {
		_ = c.TokenCount()
	}
}
