package provider_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/agentq/agentq/internal/provider"
	"github.com/agentq/agentq/internal/provider/providertest"
)

// BenchmarkChatOverhead compares a rating call through Chat.Complete
// (encode, rate limiter off, retry policy, decode, JSON extraction) with a
// bare net/http POST of the same body to the same server, read and
// discarded. The difference is the client's overhead per call.
func BenchmarkChatOverhead(b *testing.B) {
	srv := providertest.New(b)
	srv.SetResponder(providertest.Fixed(`{"relevance": 0.9, "correctness": 0.8, "reason": "fine"}`))
	c, err := provider.NewChat(provider.Options{BaseURL: srv.URL, Model: "m"})
	require.NoError(b, err)
	req := ratingRequest(b, true)

	b.Run("provider", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Complete(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		body := srv.LastBody() // exactly what Complete sent
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		hc := &http.Client{Transport: tr}
		b.ReportAllocs()
		for b.Loop() {
			resp, err := hc.Post(srv.URL+"/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Fatal(resp.Status)
			}
		}
	})
}

// BenchmarkChatClientCPU isolates the client's own work from the network
// and the server, which are noisy on a shared machine: both sides use an
// in-memory transport that returns a canned answer recorded from
// providertest. The difference between provider and bare is the CPU the
// client spends per call (encoding, retry policy, decoding, JSON
// extraction).
func BenchmarkChatClientCPU(b *testing.B) {
	srv := providertest.New(b)
	srv.SetResponder(providertest.Fixed(`{"relevance": 0.9, "correctness": 0.8, "reason": "fine"}`))
	req := ratingRequest(b, true)
	rec, err := http.Post(srv.URL+"/chat/completions", "application/json",
		bytes.NewReader([]byte(`{"model":"m","messages":[{"role":"user","content":"json"}],"response_format":{"type":"json_object"}}`)))
	require.NoError(b, err)
	answer, err := io.ReadAll(rec.Body)
	require.NoError(b, err)
	rec.Body.Close()
	canned := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
		return &http.Response{
			StatusCode: 200, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header:        http.Header{"Content-Type": {"application/json"}},
			Body:          io.NopCloser(bytes.NewReader(answer)),
			ContentLength: int64(len(answer)), Request: r,
		}, nil
	})
	hc := &http.Client{Transport: canned}
	c, err := provider.NewChat(provider.Options{BaseURL: srv.URL, Model: "m", HTTPClient: hc})
	require.NoError(b, err)
	if _, err := c.Complete(context.Background(), req); err != nil {
		b.Fatal(err)
	}

	b.Run("provider", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.Complete(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bare", func(b *testing.B) {
		body := srv.LastBody()
		b.ReportAllocs()
		for b.Loop() {
			resp, err := hc.Post(srv.URL+"/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// BenchmarkChatConcurrency runs 16 calls at once against a server that
// takes 200 ms per answer and reports ideal/measured: 1 means the 16
// calls took no longer than one.
func BenchmarkChatConcurrency(b *testing.B) {
	const calls, latency = 16, 200 * time.Millisecond
	srv := providertest.New(b)
	srv.SetLatency(latency)
	c, err := provider.NewChat(provider.Options{BaseURL: srv.URL, Model: "m"})
	require.NoError(b, err)
	req := ratingRequest(b, true)
	var total time.Duration
	for b.Loop() {
		start := time.Now()
		var wg sync.WaitGroup
		for range calls {
			wg.Go(func() {
				if _, err := c.Complete(context.Background(), req); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		total += time.Since(start)
	}
	b.ReportMetric(float64(latency)*float64(b.N)/float64(total), "ideal/measured")
	b.ReportMetric(0, "ns/op")
}
