package providertest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/chat"
)

// ChatRequest is a chat-completions request as the server decoded it.
type ChatRequest struct {
	Model               string               `json:"model"`
	Messages            []chat.OpenAIMessage `json:"messages"`
	Temperature         *float64             `json:"temperature"`
	MaxCompletionTokens int                  `json:"max_completion_tokens"`
	MaxTokens           int                  `json:"max_tokens"`
	ResponseFormat      *ResponseFormat      `json:"response_format"`
	Tools               []Tool               `json:"tools"`
}

// Tool is a tool definition a chat request offers the model.
type Tool struct {
	Type     string `json:"type"` // function
	Function struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// ToolCall is a call of an offered tool, as a ToolCaller makes it.
type ToolCall struct {
	Name      string
	Arguments string // JSON text
}

// ResponseFormat is a request's response_format.
type ResponseFormat struct {
	Type       string      `json:"type"` // text, json_object or json_schema
	JSONSchema *JSONSchema `json:"json_schema"`
}

// JSONSchema is the json_schema of a response_format.
type JSONSchema struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`
	Strict      bool            `json:"strict"`
}

// JSONMode reports whether the request asked for JSON.
func (r ChatRequest) JSONMode() bool {
	return r.ResponseFormat != nil && r.ResponseFormat.Type != "text"
}

// UserText joins the text of every user message, parts included.
func (r ChatRequest) UserText() string {
	var b strings.Builder
	for _, m := range r.Messages {
		if m.Role != "user" {
			continue
		}
		b.WriteString(m.Content)
		for _, p := range m.Parts {
			b.WriteString(p.Text)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Wire shapes of OpenAI's answers, written from the API reference rather
// than taken from a client library, so a client that misreads them fails.
type (
	completion struct {
		ID                string   `json:"id"`
		Object            string   `json:"object"`
		Created           int64    `json:"created"`
		Model             string   `json:"model"`
		Choices           []choice `json:"choices"`
		Usage             *usage   `json:"usage,omitempty"`
		SystemFingerprint string   `json:"system_fingerprint"`
	}
	choice struct {
		Index        int             `json:"index"`
		Message      message         `json:"message"`
		Logprobs     json.RawMessage `json:"logprobs"`
		FinishReason string          `json:"finish_reason"`
	}
	message struct {
		Role      string          `json:"role"`
		Content   *string         `json:"content"` // null in an answer that only calls tools
		Refusal   json.RawMessage `json:"refusal"`
		ToolCalls []wireToolCall  `json:"tool_calls,omitempty"`
	}
	wireToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens,omitempty"`
		TotalTokens      int `json:"total_tokens"`
	}
	embeddingList struct {
		Object string      `json:"object"`
		Data   []embedding `json:"data"`
		Model  string      `json:"model"`
		Usage  usage       `json:"usage"`
	}
	embedding struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"` // []float32, or a base64 string
	}
	apiError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
)

var null = json.RawMessage("null")

// knobs is a snapshot of the settings one request is answered with.
type knobs struct {
	latency   time.Duration
	drop      bool
	fail      *failure
	limited   string // Retry-After of a rate-limited request; "" if admitted
	junk      Junk
	responder Responder
	ctxResp   ContextResponder
	tools     ToolCaller
	usage     [2]int
	rejectRF  bool
	apiKey    string
	dimension int
	reverse   bool
	maxBatch  int
	seq       int
}

// handle records the request, takes the knobs' values, waits the latency
// and answers.
func (s *Server) handle(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	k := s.record(r, body)
	if k.latency > 0 {
		t := time.NewTimer(k.latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	switch {
	case k.drop:
		drop(w)
		return
	case k.apiKey != "" && r.Header.Get("Authorization") != "Bearer "+k.apiKey && r.Header.Get("api-key") != k.apiKey:
		s.writeError(w, http.StatusUnauthorized, "", "Incorrect API key provided.", "invalid_request_error", "", "invalid_api_key")
		return
	case k.fail != nil:
		s.writeFailure(w, *k.fail)
		return
	case k.limited != "":
		s.writeError(w, http.StatusTooManyRequests, k.limited, "Rate limit reached for requests. Please try again later.",
			"requests", "", "rate_limit_exceeded")
		return
	case r.Method != http.MethodPost:
		s.writeError(w, http.StatusMethodNotAllowed, "", "Only POST is served here.", "invalid_request_error", "", "")
		return
	case k.junk == JunkBody:
		s.writeRaw(w, http.StatusOK, "text/html", []byte("<html><body><h1>Welcome to nginx!</h1></body></html>\n"))
		return
	}
	switch endpoint(r.URL.Path) {
	case chatPath:
		s.chat(r.Context(), w, body, k)
	case embedPath:
		s.embed(w, body, k)
	default:
		s.writeError(w, http.StatusNotFound, "", "Unknown request URL: POST "+r.URL.Path, "invalid_request_error", "", "unknown_url")
	}
}

const (
	chatPath  = "/chat/completions"
	embedPath = "/embeddings"
)

// endpoint names the API a path calls: /v1/chat/completions, or Azure's
// /openai/v1/... and /openai/deployments/NAME/...; "" for anything else.
func endpoint(path string) string {
	for _, p := range []string{chatPath, embedPath} {
		if path == "/v1"+p || (strings.HasPrefix(path, "/openai/") && strings.HasSuffix(path, p)) {
			return p
		}
	}
	return ""
}

// record counts the request and snapshots the knobs, consuming one
// FailNext or DropNext and one rate-limit slot.
func (s *Server) record(r *http.Request, body []byte) knobs {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	s.times = append(s.times, time.Now())
	s.lastBody = body
	s.lastHeader = r.Header.Clone()
	s.lastURL = r.URL.String()
	switch endpoint(r.URL.Path) {
	case chatPath:
		s.chats++
	case embedPath:
		s.embeds++
	}
	s.seq++
	k := knobs{
		latency: s.latency, junk: s.junk, responder: s.responder, ctxResp: s.ctxResp, tools: s.tools, usage: s.usage, rejectRF: s.rejectRF,
		apiKey: s.apiKey, dimension: s.dimension, reverse: s.reverse, maxBatch: s.maxBatch, seq: s.seq,
	}
	switch {
	case s.dropNext > 0:
		s.dropNext--
		k.drop = true
	case len(s.failNext) > 0:
		f := s.failNext[0]
		s.failNext = s.failNext[1:]
		k.fail = &f
	case s.failing != nil:
		f := *s.failing
		k.fail = &f
	case s.limiter != nil:
		res := s.limiter.Reserve()
		if d := res.Delay(); d > 0 {
			res.Cancel()
			k.limited = strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
		}
	}
	return k
}

// drop closes the connection with a reset and no answer.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST rather than FIN: "connection reset by peer"
	}
	_ = conn.Close()
}

func (s *Server) chat(ctx context.Context, w http.ResponseWriter, body []byte, k knobs) {
	var req ChatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, 400, "", "We could not parse the JSON body of your request: "+err.Error(), "invalid_request_error", "", "")
		return
	}
	s.mu.Lock()
	s.lastChat = req
	s.mu.Unlock()
	if req.Model == "" {
		s.writeError(w, 400, "", "you must provide a model parameter", "invalid_request_error", "model", "")
		return
	}
	if len(req.Messages) == 0 {
		s.writeError(w, 400, "", "'messages' must contain at least one message.", "invalid_request_error", "messages", "")
		return
	}
	if rf := req.ResponseFormat; rf != nil {
		if k.rejectRF {
			s.writeError(w, 400, "", "response_format is not supported by this server", "invalid_request_error", "response_format", "")
			return
		}
		switch {
		case rf.Type == "json_object" && !mentionsJSON(req.Messages):
			s.writeError(w, 400, "", "'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.",
				"invalid_request_error", "messages", "")
			return
		case rf.Type != "text" && rf.Type != "json_object" && rf.Type != "json_schema":
			s.writeError(w, 400, "", fmt.Sprintf("Invalid value: '%s'. Supported values are: 'json_object', 'json_schema', and 'text'.", rf.Type),
				"invalid_request_error", "response_format.type", "invalid_value")
			return
		case rf.Type == "json_schema" && (rf.JSONSchema == nil || rf.JSONSchema.Name == "" || len(rf.JSONSchema.Schema) == 0):
			s.writeError(w, 400, "", "Missing required parameter: 'response_format.json_schema'.",
				"invalid_request_error", "response_format.json_schema", "missing_required_parameter")
			return
		}
	}

	resp := completion{
		ID:                fmt.Sprintf("chatcmpl-providertest-%06d", k.seq),
		Object:            "chat.completion",
		Created:           time.Now().Unix(),
		Model:             req.Model,
		SystemFingerprint: "fp_providertest",
	}
	var content string
	switch {
	case k.junk == JunkContent:
		content = "I looked at the output carefully and I think it is pretty good, maybe an eight out of ten!"
	case k.junk == JunkNoChoices:
	case k.ctxResp != nil:
		content = k.ctxResp(ctx, req)
	default:
		content = k.responder(req)
	}
	finish := "stop"
	if limit := max(req.MaxCompletionTokens, req.MaxTokens); limit > 0 {
		if words := strings.Fields(content); len(words) > limit {
			content = strings.Join(words[:limit], " ")
			finish = "length"
		}
	}
	var calls []ToolCall
	if k.tools != nil && len(req.Tools) > 0 && k.junk == JunkOff {
		calls = k.tools(req)
	}
	if k.junk != JunkNoChoices {
		msg := message{Role: "assistant", Content: &content, Refusal: null}
		for i, c := range calls {
			tc := wireToolCall{ID: fmt.Sprintf("call_%06d_%d", k.seq, i), Type: "function"}
			tc.Function.Name, tc.Function.Arguments = c.Name, c.Arguments
			msg.ToolCalls = append(msg.ToolCalls, tc)
		}
		if len(calls) > 0 {
			finish = "tool_calls"
			if content == "" {
				msg.Content = nil
			}
		}
		resp.Choices = []choice{{Message: msg, Logprobs: null, FinishReason: finish}}
	}
	switch {
	case k.usage[0] < 0:
	case k.usage != [2]int{}:
		resp.Usage = &usage{PromptTokens: k.usage[0], CompletionTokens: k.usage[1], TotalTokens: k.usage[0] + k.usage[1]}
	default:
		prompt := 0
		for _, m := range req.Messages {
			prompt += len(strings.Fields(m.Content)) + 3 // per-message framing, as OpenAI counts it
		}
		answer := len(strings.Fields(content))
		resp.Usage = &usage{PromptTokens: prompt, CompletionTokens: answer, TotalTokens: prompt + answer}
	}
	s.writeJSON(w, http.StatusOK, resp)
}

func (s *Server) embed(w http.ResponseWriter, body []byte, k knobs) {
	var req struct {
		Input          json.RawMessage `json:"input"`
		Model          string          `json:"model"`
		Dimensions     int             `json:"dimensions"`
		EncodingFormat string          `json:"encoding_format"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, 400, "", "We could not parse the JSON body of your request: "+err.Error(), "invalid_request_error", "", "")
		return
	}
	if req.Model == "" {
		s.writeError(w, 400, "", "you must provide a model parameter", "invalid_request_error", "model", "")
		return
	}
	inputs, ok := embeddingInputs(req.Input)
	if !ok {
		s.writeError(w, 400, "", "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.",
			"invalid_request_error", "input", "")
		return
	}
	if k.maxBatch > 0 && len(inputs) > k.maxBatch {
		s.writeError(w, 400, "", fmt.Sprintf("'$.input' has %d items, at most %d are allowed.", len(inputs), k.maxBatch),
			"invalid_request_error", "input", "")
		return
	}
	dim := k.dimension
	if req.Dimensions > 0 {
		dim = req.Dimensions
	}
	list := embeddingList{Object: "list", Model: req.Model, Data: make([]embedding, len(inputs))}
	tokens := 0
	for i, text := range inputs {
		var v any = Vector(text, dim)
		if req.EncodingFormat == "base64" {
			v = base64Floats(v.([]float32))
		}
		list.Data[i] = embedding{Object: "embedding", Index: i, Embedding: v}
		tokens += len(strings.Fields(text))
	}
	if k.reverse {
		for i, j := 0, len(list.Data)-1; i < j; i, j = i+1, j-1 {
			list.Data[i], list.Data[j] = list.Data[j], list.Data[i]
		}
	}
	list.Usage = usage{PromptTokens: tokens, TotalTokens: tokens}
	s.mu.Lock()
	s.batches = append(s.batches, len(inputs))
	s.mu.Unlock()
	s.writeJSON(w, http.StatusOK, list)
}

// mentionsJSON reports whether any message says "json", which OpenAI
// requires of json_object requests.
func mentionsJSON(msgs []chat.OpenAIMessage) bool {
	for _, m := range msgs {
		if strings.Contains(strings.ToLower(m.Content), "json") {
			return true
		}
		for _, p := range m.Parts {
			if strings.Contains(strings.ToLower(p.Text), "json") {
				return true
			}
		}
	}
	return false
}

// embeddingInputs reads input as a string, a list of strings, or token
// ids (one list or several, rendered as text); empty inputs are invalid.
func embeddingInputs(raw json.RawMessage) ([]string, bool) {
	var one string
	var many []string
	var ids []int
	var idLists [][]int
	var out []string
	switch {
	case json.Unmarshal(raw, &one) == nil:
		out = []string{one}
	case json.Unmarshal(raw, &many) == nil:
		out = many
	case json.Unmarshal(raw, &ids) == nil:
		out = []string{fmt.Sprint(ids)}
	case json.Unmarshal(raw, &idLists) == nil:
		for _, l := range idLists {
			out = append(out, fmt.Sprint(l))
		}
	default:
		return nil, false
	}
	if len(out) == 0 {
		return nil, false
	}
	for _, s := range out {
		if s == "" || s == "[]" {
			return nil, false
		}
	}
	return out, true
}

func base64Floats(v []float32) string {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.LittleEndian, v)
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// writeFailure answers with an injected failure status and the error body
// OpenAI sends with it.
func (s *Server) writeFailure(w http.ResponseWriter, f failure) {
	msg, typ, code := http.StatusText(f.status), "invalid_request_error", ""
	switch {
	case f.status == http.StatusTooManyRequests:
		msg, typ, code = "Rate limit reached for requests. Please try again later.", "requests", "rate_limit_exceeded"
	case f.status == http.StatusServiceUnavailable:
		msg, typ = "The engine is currently overloaded, please try again later.", "server_error"
	case f.status >= 500:
		msg, typ = "The server had an error while processing your request. Sorry about that!", "server_error"
	}
	s.writeError(w, f.status, f.retryAfter, msg, typ, "", code)
}

func (s *Server) writeError(w http.ResponseWriter, status int, retryAfter, msg, typ, param, code string) {
	if retryAfter != "" {
		w.Header().Set("Retry-After", retryAfter)
	}
	e := apiError{Message: msg, Type: typ}
	if param != "" {
		e.Param = &param
	}
	if code != "" {
		e.Code = &code
	}
	s.writeJSON(w, status, map[string]apiError{"error": e})
}

func (s *Server) writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err) // the shapes above always encode
	}
	s.writeRaw(w, status, "application/json", data)
}

func (s *Server) writeRaw(w http.ResponseWriter, status int, contentType string, data []byte) {
	s.mu.Lock()
	s.answered[status]++
	s.mu.Unlock()
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	_, _ = w.Write(data)
}
