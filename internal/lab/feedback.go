package lab

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentq/agentq/internal/bus"
)

// The lab's read model of negative feedback, for runs from feedback.
// feedback.submitted on a prompt is kept when it is negative (thumbs down
// or a rating under 0.5); prompt.used is kept when it names a run, so that
// feedback naming only its run finds the query and the response. Both are
// kept for AGENTQ_LAB_FEEDBACK_RETENTION by their event's time (see
// applyRows); a run from feedback carries its samples in its spec from
// its acceptance, so no prune takes them from it. The content hashes the
// prompt read model keeps with each version (from prompt.indexed) resolve
// events that name a version by its hash. Every row is one event (applying
// it again changes nothing) and the joins are made when the feedback is
// read, so the events may arrive in any order.

// negativeRating is the rating under which feedback is negative.
const negativeRating = 0.5

// maxFeedbackText bounds each text kept from feedback and prompt.used: a
// query beyond it is no test query anyone would write by hand.
const maxFeedbackText = 8 << 10

// feedbackIn is the part of feedback.submitted the lab keeps.
type feedbackIn struct {
	Target     string   `json:"target"`
	PromptID   string   `json:"prompt_id"`
	Version    *int     `json:"version"`
	PromptHash string   `json:"prompt_hash"`
	RunID      string   `json:"run_id"`
	Thumbs     string   `json:"thumbs"`
	Rating     *float64 `json:"rating"`
	Comment    string   `json:"comment"`
	Query      string   `json:"query"`
	Response   string   `json:"response"`
}

func (f feedbackIn) negative() bool {
	return f.Thumbs == "down" || (f.Rating != nil && *f.Rating < negativeRating)
}

// kept reports whether the lab keeps anything of an event: all but
// feedback.submitted that is not negative feedback on a prompt, and
// prompt.used that names no run or carries no text.
func kept(d *bus.Delivery) (bool, error) {
	switch d.Event.Type() {
	case typeFeedback:
		var f feedbackIn
		if err := bus.DecodeData(d.Event.Data(), &f); err != nil {
			return false, bus.Permanentf("feedback.submitted data: %v", err)
		}
		return f.Target == "prompt" && f.negative(), nil
	case typePromptUsed:
		var u promptUsed
		if err := bus.DecodeData(d.Event.Data(), &u); err != nil {
			return false, bus.Permanentf("prompt.used data: %v", err)
		}
		return u.RunID != "" && (u.Input != "" || u.Output != ""), nil
	}
	return true, nil
}

// feedbackRow is the statement keeping a negative feedback.submitted on a
// prompt (kept has said it is one), at its time; nil for one already older
// than the retention (0: kept forever) at now, as for usedRow.
func feedbackRow(d *bus.Delivery, now time.Time, retention time.Duration) (func(*pgx.Batch), error) {
	var f feedbackIn
	if err := bus.DecodeData(d.Event.Data(), &f); err != nil {
		return nil, bus.Permanentf("feedback.submitted data: %v", err)
	}
	at := d.Event.Time()
	if at.IsZero() {
		at = d.Time // the stream's time when the publisher set none
	}
	if retention > 0 && at.Before(now.Add(-retention)) {
		return nil, nil
	}
	var thumbs any
	if f.Thumbs != "" {
		thumbs = f.Thumbs
	}
	args := []any{d.Tenant, d.Event.ID(), f.PromptID, f.Version, f.PromptHash, f.RunID, thumbs, f.Rating,
		cutText(f.Comment), cutText(f.Query), cutText(f.Response), at.UTC()}
	return func(b *pgx.Batch) {
		b.Queue(`
			INSERT INTO lab_feedback (tenant_id, event_id, prompt_id, version, prompt_hash, run_id, thumbs, rating,
				comment, query, response, submitted_at)
			VALUES ($1, $2, nullif($3, ''), $4, nullif($5, ''), nullif($6, ''), $7, $8, nullif($9, ''), nullif($10, ''), nullif($11, ''), $12)
			ON CONFLICT DO NOTHING`, args...)
	}, nil
}

// promptUsed is the part of prompt.used the lab keeps.
type promptUsed struct {
	PromptID   string `json:"prompt_id"`
	Version    *int   `json:"version"`
	PromptHash string `json:"prompt_hash"`
	RunID      string `json:"run_id"`
	StepIdx    *int   `json:"step_idx"`
	Input      string `json:"input"`
	Output     string `json:"output"`
}

// usedRow is the statement keeping a prompt.used that names its run (kept
// has said it does), at its time; nil for one already older than the
// retention (0: kept forever) at now, which a prune would delete: a replay
// of old events does not bring back what was pruned.
func usedRow(d *bus.Delivery, now time.Time, retention time.Duration) (func(*pgx.Batch), error) {
	var u promptUsed
	if err := bus.DecodeData(d.Event.Data(), &u); err != nil {
		return nil, bus.Permanentf("prompt.used data: %v", err)
	}
	at := d.Event.Time()
	if at.IsZero() {
		at = d.Time
	}
	if retention > 0 && at.Before(now.Add(-retention)) {
		return nil, nil
	}
	args := []any{d.Tenant, d.Event.ID(), u.RunID, u.PromptID, u.Version, u.PromptHash, u.StepIdx, int64(d.StreamSeq),
		cutText(u.Input), cutText(u.Output), at.UTC()}
	return func(b *pgx.Batch) {
		b.Queue(`
			INSERT INTO lab_prompt_uses (tenant_id, event_id, run_id, prompt_id, version, prompt_hash, step_idx, stream_seq, input, output, used_at)
			VALUES ($1, $2, $3, nullif($4, ''), $5, nullif($6, ''), $7, $8, nullif($9, ''), nullif($10, ''), $11)
			ON CONFLICT DO NOTHING`, args...)
	}, nil
}

func cutText(s string) string { return cutTo(s, maxFeedbackText) }

// cutTo cuts s to at most n bytes, on a character boundary.
func cutTo(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutUTF8(s, n)
}

// Negative is one negative feedback on a prompt, resolved: its version
// and its query and response, from the feedback or else from the
// prompt.used of its run.
type Negative struct {
	EventID  string    `json:"event_id"`
	Version  int       `json:"version,omitempty"` // 0: not known
	Query    string    `json:"query"`
	Response string    `json:"response,omitempty"`
	Comment  string    `json:"comment,omitempty"`
	Verdict  string    `json:"verdict"`
	At       time.Time `json:"at"`
}

// feedbackWindow selects feedback: since (if set) at or after a time;
// until (if set) at or before one; fresh, only feedback no incremental run
// has looked at.
type feedbackWindow struct {
	since, until *time.Time
	fresh        bool
}

// negatives reads the negative feedback on a prompt in a window, newest
// first. Feedback whose query is known neither from itself nor from its
// run's prompt.used is counted in withoutQuery, not returned: it can be
// neither shown as an example nor tested.
func negatives(ctx context.Context, q querier, tenant, promptID string, w feedbackWindow) (out []Negative, withoutQuery []string, err error) {
	rows, err := q.Query(ctx, `
		SELECT f.event_id, coalesce(f.version, h.version, 0),
			coalesce(f.query, u.input, ''), coalesce(f.response, u.output, ''), coalesce(f.comment, ''),
			coalesce(f.thumbs, ''), f.rating, f.submitted_at
		FROM lab_feedback f
		LEFT JOIN LATERAL (
			SELECT h.version FROM lab_prompt_versions h
			WHERE h.tenant_id = f.tenant_id AND h.content_hash = f.prompt_hash AND h.prompt_id = $2
			ORDER BY h.version LIMIT 1
		) h ON f.prompt_id IS NULL
		LEFT JOIN LATERAL (
			SELECT u.input, u.output FROM lab_prompt_uses u
			WHERE u.tenant_id = f.tenant_id AND u.run_id = f.run_id
			  AND (u.prompt_id = $2 OR (u.prompt_id IS NULL AND EXISTS (
				SELECT 1 FROM lab_prompt_versions uh
				WHERE uh.tenant_id = u.tenant_id AND uh.content_hash = u.prompt_hash AND uh.prompt_id = $2)))
			ORDER BY u.step_idx DESC NULLS LAST, u.stream_seq DESC LIMIT 1
		) u ON f.run_id IS NOT NULL
		WHERE f.tenant_id = $1 AND (f.prompt_id = $2 OR (f.prompt_id IS NULL AND h.version IS NOT NULL))
		  AND ($3::timestamptz IS NULL OR f.submitted_at >= $3)
		  AND ($4::timestamptz IS NULL OR f.submitted_at <= $4)
		  AND (NOT $5 OR f.analysed_by IS NULL)
		ORDER BY f.submitted_at DESC, f.event_id DESC`, tenant, promptID, w.since, w.until, w.fresh)
	if err != nil {
		return nil, nil, fmt.Errorf("negative feedback: %w", err)
	}
	var n Negative
	var thumbs string
	var rating *float64
	_, err = pgx.ForEachRow(rows, []any{&n.EventID, &n.Version, &n.Query, &n.Response, &n.Comment, &thumbs, &rating, &n.At}, func() error {
		if strings.TrimSpace(n.Query) == "" {
			withoutQuery = append(withoutQuery, n.EventID)
			return nil
		}
		var verdict []string
		if thumbs == "down" {
			verdict = append(verdict, "thumbs down")
		}
		if rating != nil {
			verdict = append(verdict, "rating "+strconv.FormatFloat(*rating, 'g', 3, 64))
		}
		n.Verdict = strings.Join(verdict, ", ")
		n.At = n.At.UTC()
		out = append(out, n)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("negative feedback: %w", err)
	}
	return out, withoutQuery, nil
}
