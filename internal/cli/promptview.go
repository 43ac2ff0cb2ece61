package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/agentq/agentq/internal/bus"
	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/service"
)

// --- agentq prompt get ---

// promptView is a prompt version as prompts.get and search.prompts return
// it.
type promptView struct {
	ID          string          `json:"id"`
	Version     int             `json:"version"`
	ContentHash string          `json:"content_hash"`
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Content     string          `json:"content"`
	Description string          `json:"description"`
	Parameters  []paramView     `json:"parameters"`
	Tags        []string        `json:"tags"`
	Labels      []string        `json:"labels"`
	Author      string          `json:"author"`
	Metadata    json.RawMessage `json:"metadata"`
	Tenant      string          `json:"tenant"`
	CreatedAt   string          `json:"created_at"`
}

type paramView struct {
	Name        string          `json:"name"`
	Type        string          `json:"type"`
	Required    bool            `json:"required"`
	Default     json.RawMessage `json:"default"`
	Description string          `json:"description"`
}

// parseParams merges --params-json and the --param flags into one object.
func parseParams(paramsJSON string, params []string) (map[string]any, error) {
	out := map[string]any{}
	if paramsJSON != "" {
		dec := json.NewDecoder(strings.NewReader(paramsJSON))
		dec.UseNumber()
		if err := dec.Decode(&out); err != nil || out == nil {
			return nil, fmt.Errorf("--params-json must be a JSON object: %v", err)
		}
	}
	for _, p := range params {
		if k, v, ok := strings.Cut(p, ":="); ok && !strings.Contains(k, "=") {
			dec := json.NewDecoder(strings.NewReader(v))
			dec.UseNumber()
			var val any
			if err := dec.Decode(&val); err != nil {
				return nil, fmt.Errorf("--param %s: the value after := must be JSON: %v", p, err)
			}
			out[k] = val
			continue
		}
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--param %q: want Name=value or Name:=JSON", p)
		}
		out[k] = v
	}
	return out, nil
}

func runPromptGet(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "prompt get"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	version := fs.Int("version", 0, "version number (default: the version labelled production, else the latest)")
	label := fs.String("label", "", "label whose version to get, e.g. production or staging")
	var params listFlag
	fs.Var(&params, "param", "template parameter Name=value (a string) or Name:=JSON (any JSON value); repeatable")
	paramsJSON := fs.String("params-json", "", "template parameters as one JSON object")
	timeout := fs.Duration("timeout", requestTimeout, "how long to wait for the reply")
	asJSON := fs.Bool("json", false, "print the reply as JSON (prompt and rendered)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usageError(e, fs, name, "the prompt ID is required")
	case len(pos) > 1:
		return usageError(e, fs, name, "one prompt ID, got %d arguments", len(pos))
	case *version != 0 && *label != "":
		return usageError(e, fs, name, "--version and --label exclude each other")
	case *version < 0:
		return usageError(e, fs, name, "--version must be at least 1")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	values, err := parseParams(*paramsJSON, params)
	if err != nil {
		return usageError(e, fs, name, "%v", err)
	}
	req := map[string]any{"id": pos[0]}
	if *version > 0 {
		req["version"] = *version
	}
	if *label != "" {
		req["label"] = *label
	}
	if len(values) > 0 {
		req["params"] = values
	}
	var reply struct {
		Prompt   promptView `json:"prompt"`
		Rendered string     `json:"rendered"`
	}
	var raw json.RawMessage
	if err := call(ctx, e, cfg, "prompts.get."+*tenant, *timeout, req, &raw); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, raw)
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return fmt.Errorf("decode reply: %w", err)
	}
	printPrompt(e.Stdout, reply.Prompt)
	fmt.Fprintf(e.Stdout, "\n--- content ---\n%s\n", strings.TrimRight(reply.Prompt.Content, "\n"))
	if len(values) > 0 {
		fmt.Fprintf(e.Stdout, "\n--- rendered ---\n%s\n", strings.TrimRight(reply.Rendered, "\n"))
	}
	return nil
}

func printPrompt(w io.Writer, p promptView) {
	fmt.Fprintf(w, "%s@%d  %s\n", p.ID, p.Version, p.Name)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, v)
		}
	}
	row("type", p.Type)
	row("tenant", p.Tenant)
	row("hash", p.ContentHash)
	row("labels", strings.Join(p.Labels, ", "))
	row("tags", strings.Join(p.Tags, ", "))
	row("author", p.Author)
	row("created", p.CreatedAt)
	row("description", oneLineText(p.Description))
	if len(p.Metadata) > 0 && string(p.Metadata) != "{}" && string(p.Metadata) != "null" {
		row("metadata", compact(p.Metadata))
	}
	_ = tw.Flush()
	if len(p.Parameters) == 0 {
		return
	}
	fmt.Fprintln(w, "  parameters:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, pa := range p.Parameters {
		var attrs []string
		if pa.Type != "" {
			attrs = append(attrs, pa.Type)
		}
		if pa.Required {
			attrs = append(attrs, "required")
		}
		if len(pa.Default) > 0 && string(pa.Default) != "null" {
			attrs = append(attrs, "default "+compact(pa.Default))
		}
		fmt.Fprintf(tw, "    %s\t%s\t%s\n", pa.Name, strings.Join(attrs, ", "), oneLineText(pa.Description))
	}
	_ = tw.Flush()
}

// call sends a request/reply call to subject and decodes the reply into
// resp. A service error reply is returned as "code: message"; a subject
// nobody serves says which service should.
func call(ctx context.Context, e Env, cfg config.Config, subject string, timeout time.Duration, req, resp any) error {
	cfg.NATSURL = natsURL(e, cfg)
	nc, err := nats.Connect(cfg.NATSURL, nats.Name("agentq-cli"))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s (start `make dev`, or set AGENTQ_NATS_URL): %w", cfg.NATSURL, err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err = service.Call(ctx, nc, subject, req, resp)
	var serr *service.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &serr):
		return serr
	case errors.Is(err, nats.ErrNoResponders):
		server := "the indexer"
		if strings.HasPrefix(subject, "experiments.") {
			server = "the lab"
		}
		return fmt.Errorf("nothing serves %s: is %s running (`make dev` runs it)?", subject, server)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("no reply on %s within %s (--timeout)", subject, timeout)
	}
	return err
}

// --- agentq prompt search ---

// components are the parts of a search score.
type components struct {
	Similarity float64 `json:"similarity"`
	Quality    float64 `json:"quality"`
	Recency    float64 `json:"recency"`
	Usage      float64 `json:"usage"`
}

// retrieval says how search found its candidates.
type retrieval struct {
	Mode     string `json:"mode"`
	Degraded bool   `json:"degraded"`
	Reason   string `json:"reason"`
}

// describe is the line the search commands print about retrieval.
func (r *retrieval) describe() string {
	if r == nil || r.Mode == "" {
		return "retrieval: not reported"
	}
	if !r.Degraded {
		return "retrieval: " + r.Mode
	}
	reason := r.Reason
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Sprintf("retrieval: %s — DEGRADED: %s", r.Mode, oneLineText(reason))
}

// searchAnswer is a search.prompts or search.tools reply, R the view of
// one result.
type searchAnswer[R any] struct {
	Results   []R        `json:"results"`
	Retrieval *retrieval `json:"retrieval"`
}

// searchCall sends a search request to subject. With asJSON it prints the
// reply as it came and says done; otherwise it decodes the reply and
// prints how it was retrieved. An error is always done.
func searchCall[R any](ctx context.Context, e Env, cfg config.Config, subject string, timeout time.Duration, req any, asJSON bool) (reply searchAnswer[R], done bool, err error) {
	var raw json.RawMessage
	if err := call(ctx, e, cfg, subject, timeout, req, &raw); err != nil {
		return reply, true, err
	}
	if asJSON {
		return reply, true, writeJSON(e.Stdout, raw)
	}
	if err := json.Unmarshal(raw, &reply); err != nil {
		return reply, true, fmt.Errorf("decode reply: %w", err)
	}
	fmt.Fprintln(e.Stdout, reply.Retrieval.describe())
	return reply, false, nil
}

func runPromptSearch(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "prompt search"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	typ := fs.String("type", "", "only prompts of this type (system, user, task, repair, routing, tool_description, chain_of_thought, custom)")
	var tags listFlag
	fs.Var(&tags, "tag", "only prompts carrying this tag; repeatable (all must match)")
	limit := fs.Int("limit", 0, "most results, 1 to 50 (default: the service's)")
	timeout := fs.Duration("timeout", requestTimeout, "how long to wait for the reply")
	asJSON := fs.Bool("json", false, "print the reply as JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageError(e, fs, name, "a QUERY is required")
	}
	if *limit < 0 || *limit > 50 {
		return usageError(e, fs, name, "--limit must be 1 to 50")
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	req := map[string]any{"query": strings.Join(pos, " ")}
	if *typ != "" {
		req["type"] = *typ
	}
	if len(tags) > 0 {
		req["tags"] = []string(tags)
	}
	if *limit > 0 {
		req["limit"] = *limit
	}
	reply, done, err := searchCall[struct {
		Prompt     promptView `json:"prompt"`
		Score      float64    `json:"score"`
		Components components `json:"components"`
	}](ctx, e, cfg, "search.prompts."+*tenant, *timeout, req, *asJSON)
	if done || err != nil {
		return err
	}
	if len(reply.Results) == 0 {
		fmt.Fprintln(e.Stdout, "no prompts match")
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tPROMPT\tTYPE\tNAME\tSCORE\tSIMILARITY\tQUALITY\tRECENCY\tUSAGE")
	for i, r := range reply.Results {
		id := fmt.Sprintf("%s@%d", r.Prompt.ID, r.Prompt.Version)
		if r.Prompt.Tenant == bus.GlobalTenant {
			id += " (" + bus.GlobalTenant + ")"
		}
		c := r.Components
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\n", i+1, id, r.Prompt.Type, truncateText(r.Prompt.Name, 40), r.Score, c.Similarity, c.Quality, c.Recency, c.Usage)
	}
	return tw.Flush()
}

// truncateText shortens s to n runes, ending with "…" when cut.
func truncateText(s string, n int) string {
	s = oneLineText(s)
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
