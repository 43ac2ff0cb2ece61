// Package webhook delivers the degrader's alerts (tool.degraded,
// tool.quarantined, tool.recovered) to HTTP endpoints: each transition
// POSTed as a CloudEvent in the HTTP binding's structured mode, signed per
// Standard Webhooks (webhook-id, webhook-timestamp, webhook-signature) when
// the endpoint has a secret, or as a Slack incoming-webhook message.
//
// Delivery is a consumer like any other: a durable pull consumer whose
// per-endpoint deliveries are recorded in Postgres, so a receiver outage or
// a restart of agentq loses nothing and a delivered alert is not sent to
// the same endpoint again. An endpoint that is down is retried with the
// runner's backoff until the alert is older than the give-up age (24 h by
// default); then the alert is dead-lettered with the reason, where
// `agentq dlq --redrive` can send it again. A 410 Gone disables the
// endpoint (logged, counted, recorded) until it is configured afresh.
// webhook-id is the alert's event id, stable across retries, so a receiver
// can drop repeats.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Format is how an endpoint wants alerts.
type Format string

const (
	// CloudEvents: the event in structured mode
	// (application/cloudevents+json).
	CloudEvents Format = "cloudevents"
	// Slack: a Slack incoming-webhook message ({"text": ...}).
	Slack Format = "slack"
)

// Endpoint is one receiver of alerts.
type Endpoint struct {
	URL     string
	Tenants map[string]bool // nil: every tenant
	Secret  []byte          // nil: unsigned
	Format  Format
}

// ID names the endpoint in records, metrics and logs without its URL's
// path or query (which often hold a token).
func (e Endpoint) ID() string {
	sum := sha256.Sum256([]byte(e.URL))
	host := e.URL
	if u, err := url.Parse(e.URL); err == nil {
		host = u.Host
	}
	return host + "-" + hex.EncodeToString(sum[:4])
}

// Wants reports whether the endpoint receives tenant's alerts.
func (e Endpoint) Wants(tenant string) bool { return e.Tenants == nil || e.Tenants[tenant] }

// ParseEndpoints reads AGENTQ_ALERT_WEBHOOK_URL: endpoints separated by
// whitespace, each a URL followed by options after semicolons:
//
//	https://hooks.example.com/agentq;tenant=acme,beta;secret=whsec_...;format=slack
//
// tenant limits the endpoint to those tenants; secret (a Standard Webhooks
// whsec_ secret, base64 after the prefix) signs its requests and overrides
// defaultSecret; format is cloudevents (default) or slack.
func ParseEndpoints(spec, defaultSecret string) ([]Endpoint, error) {
	var out []Endpoint
	seen := map[string]bool{}
	for _, entry := range strings.Fields(spec) {
		parts := strings.Split(entry, ";")
		u, err := url.Parse(parts[0])
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("webhook %q: not an http(s) URL", redact(parts[0]))
		}
		e := Endpoint{URL: parts[0], Format: CloudEvents}
		secret := defaultSecret
		for _, opt := range parts[1:] {
			k, v, ok := strings.Cut(opt, "=")
			if !ok {
				return nil, fmt.Errorf("webhook %s: option %q is not key=value", redact(parts[0]), opt)
			}
			switch k {
			case "tenant":
				e.Tenants = map[string]bool{}
				for _, t := range strings.Split(v, ",") {
					if t != "" {
						e.Tenants[t] = true
					}
				}
			case "secret":
				secret = v
			case "format":
				switch Format(v) {
				case CloudEvents, Slack:
					e.Format = Format(v)
				default:
					return nil, fmt.Errorf("webhook %s: format %q: want cloudevents or slack", redact(parts[0]), v)
				}
			default:
				return nil, fmt.Errorf("webhook %s: unknown option %q (tenant, secret, format)", redact(parts[0]), k)
			}
		}
		if secret != "" {
			key, err := DecodeSecret(secret)
			if err != nil {
				return nil, fmt.Errorf("webhook %s: %w", redact(parts[0]), err)
			}
			e.Secret = key
		}
		if seen[e.URL] {
			return nil, fmt.Errorf("webhook %s is listed twice", redact(parts[0]))
		}
		seen[e.URL] = true
		out = append(out, e)
	}
	return out, nil
}

// DecodeSecret reads a Standard Webhooks secret: "whsec_" and the base64
// of at least 24 bytes.
func DecodeSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
	if err != nil {
		return nil, fmt.Errorf("secret is not whsec_ followed by base64: %w", err)
	}
	if len(key) < 24 {
		return nil, fmt.Errorf("secret is %d bytes; Standard Webhooks asks for at least 24", len(key))
	}
	return key, nil
}

// redact keeps a URL's scheme and host: its path may hold a token.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// Sign returns the webhook-signature header value for a message: "v1,"
// and the base64 HMAC-SHA256 of "id.timestamp.body" (Standard Webhooks).
func Sign(key []byte, id string, ts time.Time, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id + "." + strconv.FormatInt(ts.Unix(), 10) + "."))
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}
