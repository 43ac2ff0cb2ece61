// Package ingest is agentq's CloudEvents-over-HTTP way in, for agents that
// have no NATS client (serverless functions, browsers, other languages'
// CloudEvents SDKs, curl, webhooks from other systems).
//
// POST /events takes a CloudEvent in any content mode of the CloudEvents
// HTTP protocol binding, read by the CloudEvents SDK (protocol/http):
// binary (ce- headers, the data as the body), structured
// (application/cloudevents+json) or a batch
// (application/cloudevents-batch+json). The tenant is the one the bearer
// token names (internal/auth); an event that names another tenant is
// refused. Each event is checked as `agentq publish` checks it (an input
// type, its data against schemas/, agentq's attribute rules) and published
// to JetStream with the tenant-scoped Nats-Msg-Id by bus.Publisher; the
// answer comes only after JetStream acknowledged every event, with one
// result per event:
//
//   - 202: every event is in the stream (accepted, or duplicate: an event of
//     the same tenant and id was already there, and is not stored again);
//   - 400: some events were refused (rejected, with a reason code and what
//     was wrong); the others of the request were published all the same;
//   - 413: the body, or the number of events, is over its limit, or every
//     event's data is over AGENTQ_MAX_PAYLOAD: nothing published;
//   - 403: every event is an operator command (auth.OperatorCommands)
//     and the token's scope is not operator: nothing published;
//   - 503 with Retry-After and no results: the endpoint is serving
//     MaxInFlight requests already, and read nothing of this one;
//   - 503 with Retry-After: JetStream did not take some events
//     (unavailable: not stored) or did not confirm them in time
//     (unconfirmed: maybe stored). Sending the same events again is safe:
//     JetStream drops an id it holds within its duplicate window, and the
//     consumers recognise an applied id after it.
//
// Tokens are never logged.
package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/agentq/agentq/internal/auth"
	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/schemas"
)

// Path is where events are posted.
const Path = "/events"

// Per-event statuses.
const (
	StatusAccepted    = "accepted"    // stored now
	StatusDuplicate   = "duplicate"   // the tenant's event with this id was already stored; not stored again
	StatusRejected    = "rejected"    // refused: see Reason and Error; sending it again will not help
	StatusUnavailable = "unavailable" // JetStream did not take it: not stored; send it again later
	StatusUnconfirmed = "unconfirmed" // no acknowledgement in time: maybe stored; send it again (same id) later
)

// Reason codes of rejected events: the dead-letter reason codes where one
// applies, so a refusal here reads like a dead letter there.
const (
	ReasonDecode         = bus.ReasonDecode         // not a CloudEvent agentq can carry
	ReasonOversize       = bus.ReasonOversize       // data over AGENTQ_MAX_PAYLOAD
	ReasonTenantMismatch = bus.ReasonTenantMismatch // tenantid is not the token's tenant
	ReasonUnknownType    = bus.ReasonUnknownType    // no schema for the type
	ReasonSchema         = bus.ReasonSchema         // data does not match the type's schema
	// ReasonNotInput refuses a result type: only agentq's consumers
	// publish results (quality.changed, tool.quarantined, ...).
	ReasonNotInput = "not_input"
	// ReasonForbidden refuses an operator command (auth.OperatorCommands)
	// sent with a token that is not of scope operator.
	ReasonForbidden = "forbidden"
)

// InputTypes are the types agents and operators publish, and the only
// ones ingest accepts.
var InputTypes = []string{
	"agentq.tool.registered.v1", "agentq.tool.executed.v1",
	"agentq.prompt.created.v1", "agentq.prompt.used.v1",
	"agentq.feedback.submitted.v1", "agentq.experiment.requested.v1",
	"agentq.experiment.cancelled.v1", "agentq.prompt.activated.v1", "agentq.tool.released.v1",
}

// Authenticator says what a request's token grants (its tenant and
// scope), or fails (a 401). *auth.File and *auth.Tokens satisfy it.
type Authenticator interface {
	Authenticate(r *http.Request) (auth.Grant, error)
}

// Options bound what a request may carry and how long it may wait.
type Options struct {
	MaxPayload int           // bytes of one event's data (AGENTQ_MAX_PAYLOAD)
	MaxBody    int           // bytes of one request body (AGENTQ_INGEST_MAX_BODY)
	MaxBatch   int           // events in one batch (AGENTQ_INGEST_MAX_BATCH)
	AckTimeout time.Duration // longest wait for JetStream's acks (AGENTQ_INGEST_ACK_TIMEOUT)
	// MaxInFlight bounds the requests served at once
	// (AGENTQ_INGEST_MAX_INFLIGHT); 0 is DefaultMaxInFlight.
	MaxInFlight int
	// Registerer receives the endpoint's counters; nil: none.
	Registerer prometheus.Registerer
	Log        zerolog.Logger
}

// envelope is the room a single event's request body gets beyond its data:
// the attributes (at most bus.MaxHeaderBytes) and the JSON around them.
const envelope = 64 << 10

// retryAfter is what a 503 tells the client to wait, in seconds.
const retryAfter = "2"

// DefaultMaxInFlight is the bound on requests served at once when
// Options.MaxInFlight is 0.
const DefaultMaxInFlight = 64

// retryBusy is what a 503 for a full endpoint tells the client to wait,
// in seconds: a slot frees as soon as a request in flight is answered,
// usually within milliseconds.
const retryBusy = "1"

// maxPending bounds the events published and not yet acknowledged, over
// every request at once; a request waits for room beyond it.
const maxPending = 4096

// Handler serves the endpoint. It is safe for concurrent use.
type Handler struct {
	nc     *nats.Conn
	pub    *bus.Publisher
	schema bus.Validator
	auth   Authenticator
	o      Options
	mux    *http.ServeMux

	events   *prometheus.CounterVec
	requests *prometheus.CounterVec
	inFlight prometheus.Gauge

	// slots holds a token per request in flight: a request that finds it
	// full is answered 503 at once, before its body is read, so the memory
	// bodies take is bounded by MaxInFlight × MaxBody.
	slots chan struct{}
}

// Connect opens the connection the endpoint publishes on. It never
// buffers publishes while reconnecting: an event sent during an outage
// must fail at once (unavailable, not stored) rather than be stored later
// behind the back of a client that was told 503.
func Connect(url, name string, log zerolog.Logger) (*nats.Conn, error) {
	nc, err := nats.Connect(url, nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn().Err(err).Msg("nats disconnected: ingest answers 503 until it reconnects")
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info().Str("url", c.ConnectedUrl()).Msg("nats reconnected") }))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return nc, nil
}

// New returns the endpoint publishing on nc, validating with schema and
// authenticating with auth.
func New(nc *nats.Conn, schema bus.Validator, auth Authenticator, o Options) (*Handler, error) {
	if o.MaxPayload <= 0 || o.MaxBody <= 0 || o.MaxBatch <= 0 || o.AckTimeout <= 0 || o.MaxInFlight < 0 {
		return nil, errors.New("ingest: MaxPayload, MaxBody, MaxBatch and AckTimeout must be positive, MaxInFlight not negative")
	}
	if o.MaxInFlight == 0 {
		o.MaxInFlight = DefaultMaxInFlight
	}
	// A JetStream context of its own: its ack timeout is the endpoint's,
	// and its window is not shared with anything else in the process.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(maxPending), jetstream.WithPublishAsyncTimeout(o.AckTimeout))
	if err != nil {
		return nil, fmt.Errorf("ingest: %w", err)
	}
	h := &Handler{nc: nc, pub: bus.NewPublisher(js, schema), schema: schema, auth: auth, o: o, mux: http.NewServeMux(),
		slots: make(chan struct{}, o.MaxInFlight)}
	h.events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentq", Name: "ingest_events_total",
		Help: "Events received over HTTP, by status (accepted, duplicate, rejected, unavailable, unconfirmed).",
	}, []string{"status"})
	h.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "agentq", Name: "ingest_requests_total",
		Help: "Requests to the ingest endpoint, by HTTP status code.",
	}, []string{"code"})
	h.inFlight = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "agentq", Name: "ingest_requests_in_flight",
		Help: "Requests the ingest endpoint is serving now (at most AGENTQ_INGEST_MAX_INFLIGHT; more are answered 503).",
	})
	if o.Registerer != nil {
		h.events = register(o.Registerer, h.events)
		h.requests = register(o.Registerer, h.requests)
		h.inFlight = register(o.Registerer, h.inFlight)
	}
	h.mux.HandleFunc("POST "+Path, h.post)
	h.mux.HandleFunc("OPTIONS "+Path, h.options)
	h.mux.HandleFunc("GET /healthz", h.healthz)
	return h, nil
}

// register registers c, or returns the one already registered under its
// name (two endpoints in one process share the metrics).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

// ServeHTTP serves POST and OPTIONS on Path and GET /healthz.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// healthz answers 200 while the NATS connection is up.
func (h *Handler) healthz(w http.ResponseWriter, _ *http.Request) {
	if !h.nc.IsConnected() {
		http.Error(w, "nats disconnected", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// options answers two handshakes. The CloudEvents HTTP webhook spec's
// abuse protection, so senders that validate an endpoint first (Azure
// Event Grid and others) can deliver to this one; and a browser's CORS
// preflight, so agents in web pages can post. Any origin may do both:
// every POST is authenticated by a token the client sends itself, never by
// a cookie a browser would add on its own.
func (h *Handler) options(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", "POST, OPTIONS")
	if origin := r.Header.Get("WebHook-Request-Origin"); origin != "" {
		w.Header().Set("WebHook-Allowed-Origin", origin)
		w.Header().Set("WebHook-Allowed-Rate", "*")
	}
	if r.Header.Get("Origin") != "" && r.Header.Get("Access-Control-Request-Method") != "" {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Methods", "POST")
		// Authorization is never covered by a wildcard: name what was asked
		// (the ce- headers of binary mode among them).
		if hs := r.Header.Get("Access-Control-Request-Headers"); hs != "" {
			w.Header().Set("Access-Control-Allow-Headers", hs)
		}
		w.Header().Set("Access-Control-Max-Age", "600")
	}
	w.WriteHeader(http.StatusOK)
}

// Result is what became of one event.
type Result struct {
	Index  int    `json:"index"` // position in the request, from 0
	ID     string `json:"id,omitempty"`
	Type   string `json:"type,omitempty"`
	Status string `json:"status"`
	Stream string `json:"stream,omitempty"` // where it is stored (accepted, duplicate)
	Seq    uint64 `json:"seq,omitempty"`    // its sequence there (for a duplicate: the stored one's)
	Reason string `json:"reason,omitempty"` // reason code (rejected)
	Error  string `json:"error,omitempty"`  // what was wrong (rejected, unavailable, unconfirmed)
}

// Response is the body of every answer to a POST that got as far as its
// events.
type Response struct {
	Accepted    int      `json:"accepted"`
	Duplicate   int      `json:"duplicate"`
	Rejected    int      `json:"rejected"`
	Unavailable int      `json:"unavailable"`
	Unconfirmed int      `json:"unconfirmed"`
	Message     string   `json:"message"` // what happened, and what to do
	Results     []Result `json:"results"`
}

// ErrorBody is the body of an answer about the request as a whole (401,
// 413, 415, 400 for an unreadable body): nothing was published.
type ErrorBody struct {
	Code  string `json:"code"`
	Error string `json:"error"`
}

// item is one event of a request on its way through.
type item struct {
	res Result
	ev  event.Event
	fut jetstream.PubAckFuture
}

func (h *Handler) post(w http.ResponseWriter, r *http.Request) {
	grant, err := h.auth.Authenticate(r)
	if err != nil {
		// The error names no token: auth's errors never carry one.
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentq"`)
		h.fail(w, http.StatusUnauthorized, "unauthorized", err.Error())
		return
	}
	select {
	case h.slots <- struct{}{}:
		h.inFlight.Inc()
		defer func() { <-h.slots; h.inFlight.Dec() }()
	default:
		// 503, not 429: the bound is the endpoint's, over every client,
		// not a rate this client exceeded (the CloudEvents webhook spec
		// keeps 429 for a granted rate, and options grants any), and
		// senders retry a 503 as a 429 (the CloudEvents SDK's retrying
		// send; go-retryablehttp, which waits out Retry-After).
		w.Header().Set("Retry-After", retryBusy)
		h.fail(w, http.StatusServiceUnavailable, "overloaded", fmt.Sprintf(
			"the endpoint is serving %d requests already, its limit: nothing was read or stored. Send the request again after Retry-After", h.o.MaxInFlight))
		return
	}
	items, rerr := h.read(w, r, caller{grant: grant})
	if rerr != nil {
		h.fail(w, rerr.code, rerr.name, rerr.msg)
		return
	}
	h.publish(r.Context(), items)
	h.answer(w, grant.Tenant, items)
}

var errBatchTooLong = errors.New("batch too long")

// requestError refuses a request as a whole: nothing of it is published.
type requestError struct {
	code      int
	name, msg string
}

// read decodes the events of a request and checks each, refusing the
// ones agentq would not publish; what is left unrefused is to be
// published. It never panics, and a member of a batch that is refused
// never takes another with it (FuzzRead holds it to both).
func (h *Handler) read(w http.ResponseWriter, r *http.Request, c caller) ([]*item, *requestError) {
	c.traceParent, c.traceState = requestTrace(r.Header)
	r.Body = http.MaxBytesReader(w, r.Body, int64(h.o.MaxBody))
	msg := cehttp.NewMessageFromHttpRequest(r)
	var (
		items []*item
		err   error
	)
	switch msg.ReadEncoding() {
	case binding.EncodingBatch:
		items, err = h.readBatch(msg.BodyReader)
	case binding.EncodingBinary, binding.EncodingStructured:
		// One event: its body is bounded by its data's limit too.
		msg.BodyReader = http.MaxBytesReader(w, msg.BodyReader, int64(min(h.o.MaxBody, h.o.MaxPayload+envelope)))
		items, err = h.readOne(r.Context(), msg)
	default:
		return nil, &requestError{http.StatusUnsupportedMediaType, "unsupported_media_type",
			"not a CloudEvent: send binary mode (ce-specversion, ce-id, ce-source and ce-type headers, the data as the body with Content-Type: application/json), " +
				"or Content-Type application/cloudevents+json (one event) or application/cloudevents-batch+json (a JSON array of events)"}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, &requestError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is over its limit of %d bytes (a single event: its data may have at most %d bytes; a batch: %d bytes in all)",
			tooLarge.Limit, h.o.MaxPayload, h.o.MaxBody)}
	case errors.Is(err, errBatchTooLong):
		return nil, &requestError{http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the batch holds more than %d events: split it", h.o.MaxBatch)}
	case err != nil:
		return nil, &requestError{http.StatusBadRequest, "bad_request", err.Error()}
	}
	for _, it := range items {
		if it.res.Status == "" {
			h.check(it, c)
		}
	}
	return items, nil
}

// caller is who sent a request, and what its headers say of every event
// in it.
type caller struct {
	grant auth.Grant // the token's tenant, and what it may send
	// The request's W3C trace context (traceparent and tracestate
	// headers), for the events that carry none of their own.
	traceParent, traceState string
}

// requestTrace is the trace context of a request's headers: its one
// traceparent (two or more make none, as W3C Trace Context says) and its
// tracestate headers joined into one list.
func requestTrace(h http.Header) (traceparent, tracestate string) {
	tps := h.Values("traceparent")
	if len(tps) != 1 {
		return "", ""
	}
	return strings.TrimSpace(tps[0]), strings.Join(h.Values("tracestate"), ",")
}

// readOne reads a binary or structured event through the SDK. An event it
// cannot read is answered like a refused member of a batch.
func (h *Handler) readOne(ctx context.Context, msg *cehttp.Message) ([]*item, error) {
	ev, err := toEvent(ctx, msg)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, err
	}
	it := &item{}
	if err != nil {
		it.res = rejected(0, ReasonDecode, "not a CloudEvent: "+oneLine(err.Error()))
		return []*item{it}, nil
	}
	it.ev = *ev
	return []*item{it}, nil
}

// toEvent is binding.ToEvent (cehttp.NewEventFromHTTPRequest) made safe: a
// request must never take the endpoint down.
func toEvent(ctx context.Context, msg *cehttp.Message) (ev *event.Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			ev, err = nil, fmt.Errorf("undecodable: %v", p)
		}
	}()
	defer func() { _ = msg.Finish(err) }()
	return binding.ToEvent(ctx, msg)
}

// readBatch reads a JSON array of structured events. The SDK's batch
// reader (cehttp.NewEventsFromHTTPRequest) refuses the whole batch for one
// bad member; here each member is read on its own with the SDK's JSON
// format, so a bad member is refused alone and the others go on.
func (h *Handler) readBatch(body io.Reader) ([]*item, error) {
	dec := json.NewDecoder(body)
	tok, err := dec.Token()
	if err != nil {
		return nil, batchError(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, errors.New("a batch is a JSON array of structured CloudEvents")
	}
	var items []*item
	for dec.More() {
		if len(items) == h.o.MaxBatch {
			return nil, errBatchTooLong
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, batchError(err)
		}
		it := &item{}
		if err := unmarshalEvent(raw, &it.ev); err != nil {
			it.res = rejected(len(items), ReasonDecode, "not a CloudEvent: "+oneLine(err.Error()))
		}
		it.res.Index = len(items)
		items = append(items, it)
	}
	if _, err := dec.Token(); err != nil {
		return nil, batchError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("a batch is one JSON array: found more after it")
	}
	if len(items) == 0 {
		return nil, errors.New("the batch holds no events")
	}
	return items, nil
}

func batchError(err error) error {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return err
	}
	return fmt.Errorf("a batch is a JSON array of structured CloudEvents: %s", oneLine(err.Error()))
}

// unmarshalEvent reads one structured event as the SDK's JSON format does
// (format.JSON.Unmarshal), less its check that raw is JSON: the batch's
// decoder made sure of that.
func unmarshalEvent(raw []byte, ev *event.Event) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("undecodable: %v", p)
		}
	}()
	return ev.UnmarshalJSON(raw)
}

// check refuses what agentq publish would refuse before the schema (which
// the publisher checks), and fills what it leaves to agentq.
func (h *Handler) check(it *item, c caller) {
	tenant := c.grant.Tenant
	ev := &it.ev
	it.res.ID, it.res.Type = ev.ID(), ev.Type()
	refuse := func(reason, format string, args ...any) {
		it.res.Status, it.res.Reason, it.res.Error = StatusRejected, reason, fmt.Sprintf(format, args...)
	}
	if ev.Context == nil || ev.SpecVersion() != event.CloudEventsVersionV1 {
		refuse(ReasonDecode, "specversion %q is not supported: agentq accepts CloudEvents 1.0 only", specVersion(ev))
		return
	}
	if err := ev.Validate(); err != nil {
		refuse(ReasonDecode, "not a valid CloudEvent: %s", oneLine(err.Error()))
		return
	}
	if !slices.Contains(InputTypes, ev.Type()) {
		if strings.HasPrefix(ev.Type(), "agentq.") && schemas.URL(ev.Type()) != "" && h.known(ev.Type()) {
			refuse(ReasonNotInput, "%s is a result agentq publishes, not an input; inputs are %s", ev.Type(), strings.Join(InputTypes, ", "))
		} else {
			refuse(ReasonUnknownType, "type %q is not an agentq input event; inputs are %s", short(ev.Type()), strings.Join(InputTypes, ", "))
		}
		return
	}
	if !c.grant.MayPublish(ev.Type()) {
		refuse(ReasonForbidden, "%s is an operator command, and this token may not send it: an operator's token may (its line in the token file ends with operator; agentq token new --operator makes one)", ev.Type())
		return
	}
	switch v, ok := ev.Extensions()[bus.ExtTenant]; {
	case !ok:
		ev.SetExtension(bus.ExtTenant, tenant)
	case fmt.Sprint(v) != tenant:
		refuse(ReasonTenantMismatch, "%s %q is not the tenant of the token (%s)", bus.ExtTenant, short(fmt.Sprint(v)), tenant)
		return
	}
	if n := len(ev.Data()); n > h.o.MaxPayload {
		refuse(ReasonOversize, "data is %d bytes, over the %d-byte limit", n, h.o.MaxPayload)
		return
	}
	if ct := ev.DataContentType(); ct != "" && !bus.IsJSONContentType(ct) {
		refuse(ReasonDecode, "data must be JSON, not %q (in binary mode send Content-Type: application/json)", short(ct))
		return
	}
	// What agentq publish sets on every event, when the agent did not.
	if ev.Time().IsZero() {
		ev.SetTime(time.Now().UTC())
	}
	if ev.DataSchema() == "" {
		ev.SetDataSchema(bus.SchemaURL(ev.Type()))
	}
	// The trace the event started in: its own distributed tracing
	// extension, else the request's traceparent header (an invalid one
	// is ignored, as W3C Trace Context asks), so the trace goes on in
	// the stream and in agentq's results.
	if _, own := ev.Extensions()[bus.ExtTraceParent]; !own {
		bus.ParseTrace(c.traceParent, c.traceState).Set(ev)
	}
}

// known reports whether typ has a schema (a result type, since it is not
// an input).
func (h *Handler) known(typ string) bool {
	return !errors.Is(h.schema.Validate(typ, nil), schemas.ErrUnknownType)
}

// publish sends every event still unrefused, in request order, and waits
// until JetStream answered for each, the ack timeout passed, or the client
// went away.
func (h *Handler) publish(ctx context.Context, items []*item) {
	connected := h.nc.IsConnected()
	for _, it := range items {
		if it.res.Status != "" {
			continue
		}
		if !connected {
			it.res.Status, it.res.Error = StatusUnavailable, "NATS is not connected: not stored"
			continue
		}
		fut, err := h.pub.PublishAsync(it.ev)
		switch {
		case err == nil:
			it.fut = fut
		case bus.IsPermanent(err):
			it.res.Status, it.res.Reason, it.res.Error = StatusRejected, refusalReason(err), oneLine(refusal(err).Error())
		case errors.Is(err, nats.ErrMaxPayload):
			it.res.Status, it.res.Reason, it.res.Error = StatusRejected, ReasonOversize, "the event is larger than the NATS server accepts"
		default:
			it.res.Status, it.res.Error = StatusUnavailable, "not stored: "+oneLine(err.Error())
		}
	}
	// The JetStream context times each future out after AckTimeout; this
	// deadline only guards against one that never resolves.
	deadline := time.NewTimer(h.o.AckTimeout + time.Second)
	defer deadline.Stop()
	gaveUp := ""
	for _, it := range items {
		if it.fut == nil {
			continue
		}
		if gaveUp == "" {
			select {
			case ack := <-it.fut.Ok():
				settleAck(it, ack)
				continue
			case err := <-it.fut.Err():
				settleErr(it, err)
				continue
			case <-deadline.C:
				gaveUp = "no acknowledgement in time; it may be stored"
			case <-ctx.Done():
				gaveUp = "the client went away before the acknowledgement; it may be stored"
			}
		}
		// Given up waiting: take what has come, the rest is unconfirmed.
		select {
		case ack := <-it.fut.Ok():
			settleAck(it, ack)
		case err := <-it.fut.Err():
			settleErr(it, err)
		default:
			it.res.Status, it.res.Error = StatusUnconfirmed, gaveUp
		}
	}
}

func settleAck(it *item, ack *jetstream.PubAck) {
	it.res.Status, it.res.Stream, it.res.Seq = StatusAccepted, ack.Stream, ack.Sequence
	if ack.Duplicate {
		it.res.Status = StatusDuplicate
	}
}

func settleErr(it *item, err error) {
	var apiErr *jetstream.APIError
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.As(err, &apiErr) {
		// No stream took it, or JetStream said no: not stored.
		it.res.Status, it.res.Error = StatusUnavailable, "not stored: "+oneLine(err.Error())
		return
	}
	// A timeout or a lost connection: the event may have been stored.
	it.res.Status, it.res.Error = StatusUnconfirmed, "no acknowledgement ("+oneLine(err.Error())+"); it may be stored"
}

// refusalReason is the reason code of an event the publisher refused.
func refusalReason(err error) string {
	var verr *schemas.ValidationError
	switch {
	case errors.Is(err, schemas.ErrUnknownType):
		return ReasonUnknownType
	case errors.As(err, &verr):
		return ReasonSchema
	}
	return ReasonDecode
}

// refusal is the part of a publisher's error that says what is wrong: the
// result already names the event.
func refusal(err error) error {
	var verr *schemas.ValidationError
	if errors.As(err, &verr) {
		return verr
	}
	return err
}

// answer writes the per-event results with the status they add up to.
func (h *Handler) answer(w http.ResponseWriter, tenant string, items []*item) {
	resp := Response{Results: make([]Result, len(items))}
	oversize, forbidden := 0, 0
	for i, it := range items {
		it.res.Index = i
		resp.Results[i] = it.res
		h.events.WithLabelValues(it.res.Status).Inc()
		switch it.res.Status {
		case StatusAccepted:
			resp.Accepted++
		case StatusDuplicate:
			resp.Duplicate++
		case StatusRejected:
			resp.Rejected++
			switch it.res.Reason {
			case ReasonOversize:
				oversize++
			case ReasonForbidden:
				forbidden++
			}
		case StatusUnavailable:
			resp.Unavailable++
		case StatusUnconfirmed:
			resp.Unconfirmed++
		}
	}
	stored := resp.Accepted + resp.Duplicate
	code := http.StatusAccepted
	switch {
	case resp.Unavailable+resp.Unconfirmed > 0:
		code = http.StatusServiceUnavailable
		w.Header().Set("Retry-After", retryAfter)
		resp.Message = fmt.Sprintf("JetStream did not take %s of %d (%d not stored, %d unconfirmed); %d stored. "+
			"Send the events marked unavailable or unconfirmed again, with the same ids, after Retry-After: an id already stored is not stored twice.",
			events(resp.Unavailable+resp.Unconfirmed), len(items), resp.Unavailable, resp.Unconfirmed, stored)
		if resp.Rejected > 0 {
			resp.Message += fmt.Sprintf(" %s refused (see their errors): sending them again will not help.", events(resp.Rejected))
		}
	case resp.Rejected > 0:
		code = http.StatusBadRequest
		switch len(items) {
		case oversize:
			code = http.StatusRequestEntityTooLarge
		case forbidden:
			code = http.StatusForbidden
		}
		if stored == 0 {
			resp.Message = fmt.Sprintf("%s refused (see the errors); nothing stored.", events(resp.Rejected))
		} else {
			resp.Message = fmt.Sprintf("%d of %d events refused (see their errors); the other %d stored all the same.", resp.Rejected, len(items), stored)
		}
	case resp.Duplicate > 0 && resp.Accepted == 0:
		resp.Message = fmt.Sprintf("%s already stored (same tenant and id): nothing stored again.", events(resp.Duplicate))
	case resp.Duplicate > 0:
		resp.Message = fmt.Sprintf("%s stored; %d already stored (same tenant and id), not stored again.", events(resp.Accepted), resp.Duplicate)
	default:
		resp.Message = events(resp.Accepted) + " stored."
	}
	ev := h.o.Log.Debug()
	if code == http.StatusServiceUnavailable {
		ev = h.o.Log.Warn()
	}
	ev.Str("tenant", tenant).Int("code", code).Int("accepted", resp.Accepted).Int("duplicate", resp.Duplicate).
		Int("rejected", resp.Rejected).Int("unavailable", resp.Unavailable).Int("unconfirmed", resp.Unconfirmed).Msg("ingest")
	h.write(w, code, resp)
}

func (h *Handler) fail(w http.ResponseWriter, code int, name, msg string) {
	h.write(w, code, ErrorBody{Code: name, Error: msg})
}

func (h *Handler) write(w http.ResponseWriter, code int, body any) {
	h.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	w.Header().Set("Content-Type", "application/json")
	// Browsers let a page read the answer (see options).
	w.Header().Set("Access-Control-Allow-Origin", "*")
	w.Header().Set("Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // errors quote <token> and input as they are
	_ = enc.Encode(body)
}

// events is "1 event" or "n events".
func events(n int) string {
	if n == 1 {
		return "1 event"
	}
	return fmt.Sprintf("%d events", n)
}

func rejected(index int, reason, msg string) Result {
	return Result{Index: index, Status: StatusRejected, Reason: reason, Error: msg}
}

func specVersion(ev *event.Event) string {
	if ev.Context == nil {
		return ""
	}
	return ev.SpecVersion()
}

// short bounds an untrusted value quoted in an error.
func short(s string) string { return truncate(s, 64) }

// oneLine keeps an error on one line and bounded: it may quote input.
func oneLine(s string) string { return truncate(strings.Join(strings.Fields(s), " "), 300) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Serve serves h on ln until ctx ends, then gives the requests in flight
// up to grace to finish (each waits at most its ack timeout).
func Serve(ctx context.Context, ln net.Listener, h http.Handler, grace time.Duration) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done, stop := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
		case <-stop: // Serve failed: nothing to shut down
			return
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err := srv.Serve(ln)
	close(stop)
	<-done // Shutdown returns once the requests in flight are answered
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return fmt.Errorf("ingest on %s: %w", ln.Addr(), err)
}

// URL is the address of the endpoint served on addr, as a client writes it.
func URL(addr string) string {
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr
	}
	return "http://" + addr + Path
}
