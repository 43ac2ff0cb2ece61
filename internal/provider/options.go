package provider

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of Options and EmbedOptions.
const (
	// DefaultChatTimeout bounds a chat completion, retries and waits
	// included: the rater's budget per rating.
	DefaultChatTimeout = 5 * time.Second
	// DefaultEmbedTimeout bounds one embeddings request (one batch),
	// retries included; local servers embedding 64 texts on a CPU need
	// seconds.
	DefaultEmbedTimeout = 30 * time.Second
	// DefaultMaxRetries is how many times a failed attempt is repeated.
	DefaultMaxRetries = 3
	// DefaultBatchSize is how many texts go in one embeddings request.
	DefaultBatchSize = 64
)

// Options configure a Chat or an Embedder.
type Options struct {
	// BaseURL is the OpenAI-compatible API root, up to and including the
	// version segment: https://api.openai.com/v1, http://localhost:11434/v1
	// (Ollama), http://localhost:8000/v1 (vLLM), http://localhost:8080/v1
	// (llama.cpp), a LiteLLM proxy, or an Azure OpenAI resource's
	// https://NAME.openai.azure.com/openai/v1. A URL with no path gets /v1.
	// A query string is kept on every request, so a classic Azure
	// deployment URL works too:
	// https://NAME.openai.azure.com/openai/deployments/DEPLOYMENT?api-version=2024-10-21.
	// Required.
	BaseURL string
	// Model is the model name sent with every request (the deployment name
	// on Azure). Required.
	Model string
	// APIKey is sent as "Authorization: Bearer KEY", or as the api-key
	// header to Azure hosts (*.azure.com). Empty sends no credentials, as
	// local servers expect.
	APIKey string
	// Timeout bounds one call: a whole chat completion, or one embeddings
	// batch, with its rate-limit waits, retries and backoff. Zero means
	// DefaultChatTimeout or DefaultEmbedTimeout.
	Timeout time.Duration
	// MaxRPS caps the requests per second this client sends, every retry
	// included; requests wait for their turn, within the call's timeout.
	// Requests are spaced evenly (no bursts), which keeps a burst of events
	// under a provider's per-second and per-minute limits. Zero is
	// unlimited.
	MaxRPS float64
	// MaxRetries is how many times an attempt that failed with 408, 429,
	// 5xx (but 501) or a dropped connection is repeated, within the
	// timeout. Zero means DefaultMaxRetries; negative means none.
	MaxRetries int
	// HTTPClient sends the requests; nil uses a client of this package's
	// own with a connection pool sized for concurrent calls. Its Timeout,
	// if any, bounds each attempt.
	HTTPClient *http.Client
}

// client holds what Chat and Embedder share: the endpoint, credentials,
// limits and the HTTP client.
type client struct {
	endpoint   string // full URL of the one API path this client calls
	name       string // endpoint without its query, for error messages
	apiKey     string
	azure      bool
	timeout    time.Duration
	maxRetries int
	maxRPS     float64
	limiter    *rate.Limiter // nil: unlimited
	http       *http.Client
	maxBody    int64
}

// newClient validates opts and builds a client for path ("/chat/completions"
// or "/embeddings").
func newClient(opts Options, path string, defaultTimeout time.Duration, maxBody int64) (*client, error) {
	var errs []error
	base, err := parseBaseURL(opts.BaseURL)
	if err != nil {
		errs = append(errs, err)
	}
	if strings.TrimSpace(opts.Model) == "" {
		errs = append(errs, errors.New("model is required"))
	}
	if opts.Timeout < 0 {
		errs = append(errs, fmt.Errorf("timeout %s is negative", opts.Timeout))
	}
	if opts.MaxRPS < 0 || math.IsNaN(opts.MaxRPS) || math.IsInf(opts.MaxRPS, 0) {
		errs = append(errs, fmt.Errorf("max requests per second %g must be a finite number, 0 or more", opts.MaxRPS))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("provider options: %w", errors.Join(errs...))
	}
	c := &client{
		apiKey:     opts.APIKey,
		azure:      isAzure(base.Hostname()),
		timeout:    opts.Timeout,
		maxRetries: opts.MaxRetries,
		maxRPS:     opts.MaxRPS,
		http:       opts.HTTPClient,
		maxBody:    maxBody,
	}
	endpoint := *base
	endpoint.Path = base.Path + path
	endpoint.RawPath = ""
	c.endpoint = endpoint.String()
	endpoint.RawQuery = ""
	c.name = endpoint.String()
	if c.timeout == 0 {
		c.timeout = defaultTimeout
	}
	switch {
	case c.maxRetries == 0:
		c.maxRetries = DefaultMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	if opts.MaxRPS > 0 {
		// Burst 1: requests are spaced 1/MaxRPS apart, never bunched.
		c.limiter = rate.NewLimiter(rate.Limit(opts.MaxRPS), 1)
	}
	if c.http == nil {
		c.http = defaultHTTPClient()
	}
	return c, nil
}

// parseBaseURL checks an API root and gives a bare host the /v1 every
// OpenAI-compatible server serves.
func parseBaseURL(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("base URL is required")
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("base URL %q: want http:// or https:// and a host", s)
	}
	if u.User != nil {
		return nil, fmt.Errorf("base URL %q: put credentials in the API key, not the URL", u.Redacted())
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if u.Path == "" {
		u.Path = "/v1"
	}
	u.RawPath = ""
	u.Fragment = ""
	return u, nil
}

// isAzure reports whether host is an Azure OpenAI or AI Foundry endpoint,
// which authenticates API keys with the api-key header.
func isAzure(host string) bool {
	host = strings.ToLower(host)
	for _, suffix := range []string{".openai.azure.com", ".cognitiveservices.azure.com", ".services.ai.azure.com"} {
		if strings.HasSuffix(host, suffix) {
			return true
		}
	}
	return false
}

// defaultHTTPClient pools enough connections per host for a consumer's
// concurrent calls; Go's default keeps 2 idle per host, so a burst of 16
// calls would redial most of them every time.
func defaultHTTPClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: t}
}
