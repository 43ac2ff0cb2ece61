package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/indexer"
	"github.com/agentq/agentq/internal/lab"
	labreport "github.com/agentq/agentq/internal/report"
)

// This file holds the commands that change an experiment's course:
// cancel, and activate, the human gate that publishes prompt.activated
// for the recommended (or a chosen) version.

func runExperimentCancel(ctx context.Context, e Env, cfg config.Config, args []string) error {
	var reason, by *string
	var timeout *time.Duration
	var asJSON *bool
	tenant, id, err := idCommand(e, "experiment cancel", args, func(fs *flag.FlagSet) {
		reason = fs.String("reason", "", "why (kept in the event and the experiment's failure)")
		by = fs.String("by", e.Getenv("USER"), "who cancels it (kept in the event as cancelled_by)")
		timeout = fs.Duration("timeout", 30*time.Second, "how long to wait for the experiment to stop")
		asJSON = fs.Bool("json", false, "print the experiment as JSON once stopped")
	})
	if err != nil {
		return err
	}
	x, err := getExperiment(ctx, e, cfg, tenant, id)
	if err != nil {
		return err
	}
	if x.FinishedAt != nil {
		return fmt.Errorf("experiment %s has already ended (%s): nothing to cancel", id, x.Status)
	}
	data := map[string]any{"experiment_id": id}
	if *reason != "" {
		data["reason"] = *reason
	}
	if *by != "" {
		data["cancelled_by"] = *by
	}
	r, err := newRequest(lab.TypeCancelled, tenant, cliSource, data)
	if err != nil {
		return err
	}
	if err := r.connect(e, cfg); err != nil {
		return err
	}
	defer r.close()
	// The lab refuses the cancellation (an answer to it), or the
	// experiment ends (an answer to its request).
	ans, err := r.follow(ctx, []string{lab.TypeRejected, lab.TypeCompleted, lab.TypeFailed}, x.RequestEventID)
	if err != nil {
		return err
	}
	defer ans.Stop()
	if _, err := r.publish(ctx); err != nil {
		return err
	}
	deadline := time.Now().Add(*timeout)
	for {
		ans.Wait(ctx, time.Until(deadline), nil)
		if a, ok := ans.Get(r.ev.ID()); ok && a.Type == lab.TypeRejected {
			var r rejected
			_ = json.Unmarshal(a.Data, &r)
			return fmt.Errorf("refused by the lab: %s: %s", r.ReasonCode, oneLineText(r.Reason))
		}
		if _, ok := ans.Get(x.RequestEventID); ok || time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if x, err = getExperiment(ctx, e, cfg, tenant, id); err != nil {
		return err
	}
	if x.FinishedAt == nil {
		return fmt.Errorf("experiment %s has not stopped within %s (it is %s): is the lab running?", id, *timeout, x.Status)
	}
	if *asJSON {
		x.Report, x.Judge, x.Summary = nil, nil, ""
		return writeJSON(e.Stdout, x)
	}
	fmt.Fprintf(e.Stdout, "experiment %s %s after %d of %d trials (its report covers them: agentq experiment report %s --tenant %s)\n",
		id, x.Status, x.CompletedTrials, x.TotalTrials, id, tenant)
	return nil
}

func runExperimentActivate(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "experiment activate"
	var version *int
	var label, by *string
	var yes, asJSON *bool
	var timeout *time.Duration
	tenant, id, err := idCommand(e, name, args, func(fs *flag.FlagSet) {
		version = fs.Int("version", 0, "activate this version instead of the recommended one")
		label = fs.String("label", "production", "label to move to the version")
		by = fs.String("by", e.Getenv("USER"), "who activates it (kept in the event as activated_by)")
		yes = fs.Bool("yes", false, "do not ask for confirmation")
		timeout = fs.Duration("timeout", answerTimeout, "how long to wait for the indexer's answer")
		asJSON = fs.Bool("json", false, "print the outcome as JSON")
	})
	if err != nil {
		return err
	}
	x, err := getExperiment(ctx, e, cfg, tenant, id)
	if err != nil {
		return err
	}
	if x.Status != "completed" || len(x.Report) == 0 {
		return fmt.Errorf("experiment %s is %s: only a completed experiment's recommendation can be activated (agentq prompt activate moves a label by hand)", id, x.Status)
	}
	var rep labreport.Report
	if err := json.Unmarshal(x.Report, &rep); err != nil {
		return fmt.Errorf("decode the report: %w", err)
	}
	r := rep.Recommendation
	w := e.Stderr
	if !*asJSON {
		w = e.Stdout
	}
	fmt.Fprintf(w, "experiment %s recommends %s@%d with confidence %s (baseline: version %d)\n", id, x.PromptID, r.Version, r.Confidence, x.BaselineVersion)
	if r.Reason != "" {
		fmt.Fprintf(w, "  %s\n", oneLineText(r.Reason))
	}
	for _, it := range r.Improvements {
		fmt.Fprintf(w, "  + %s\n", oneLineText(it))
	}
	for _, it := range r.Warnings {
		fmt.Fprintf(w, "  ! %s\n", oneLineText(it))
	}
	target := r.Version
	if *version > 0 {
		if *version != x.BaselineVersion && !slices.Contains(x.CandidateVersions, *version) {
			return fmt.Errorf("version %d was not in experiment %s (versions %d and %v)", *version, id, x.BaselineVersion, x.CandidateVersions)
		}
		target = *version
		if target != r.Version {
			fmt.Fprintf(w, "you chose version %d, not the recommended %d\n", target, r.Version)
		}
	} else if r.Version == x.BaselineVersion {
		fmt.Fprintf(w, "the recommendation is to keep the baseline, version %d: nothing to activate (--version N activates another)\n", r.Version)
		return nil
	}
	if !*yes {
		fmt.Fprintf(e.Stderr, "activate %s@%d as %s for tenant %s? [y/N] ", x.PromptID, target, *label, tenant)
		line, _ := bufio.NewReader(e.Stdin).ReadString('\n')
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
		default:
			return errors.New("not confirmed: nothing was activated")
		}
	}
	data := map[string]any{
		"prompt_id": x.PromptID, "version": target, "label": *label, "experiment_id": id,
		"reason": activationReason(id, target, r),
	}
	if *by != "" {
		data["activated_by"] = *by
	}
	req, err := newRequest(indexer.TypePromptActivated, tenant, cliSource, data)
	if err != nil {
		return err
	}
	if err := req.check(); err != nil {
		return err
	}
	return activate(ctx, e, cfg, req, activation{ExperimentID: id, PromptID: x.PromptID, Version: target, Label: *label}, *timeout, *asJSON)
}

// activation is what prompt activate and experiment activate print with
// --json.
type activation struct {
	EventID      string `json:"event_id"`
	ExperimentID string `json:"experiment_id,omitempty"` // experiment activate's
	PromptID     string `json:"prompt_id"`
	Version      int    `json:"version"`
	Label        string `json:"label"`
	activationOutcome
}

// activate publishes r, a prompt.activated that moves out's label, waits
// up to timeout for the indexer's answer and prints the outcome (finish).
// The error says why the label did not move.
func activate(ctx context.Context, e Env, cfg config.Config, r *request, out activation, timeout time.Duration, asJSON bool) error {
	if err := r.connect(e, cfg); err != nil {
		return err
	}
	defer r.close()
	warnIfNoIndexer(ctx, e, r.js)
	a, err := r.await(ctx, indexer.TypePromptIndexed, indexer.TypeRejected, timeout)
	if err != nil {
		return err
	}
	out.EventID = r.ev.ID()
	var failure error
	out.activationOutcome, failure = readActivation(a, timeout, r.ev.ID())
	return finish(e, asJSON, out, failure, func(w io.Writer) {
		from := ""
		if out.ExperimentID != "" {
			from = ", activated from experiment " + out.ExperimentID
		}
		fmt.Fprintf(w, "%s@%d is now %s for tenant %s (labels on this version: %s)%s\n",
			out.PromptID, out.Version, out.Label, r.tenant(), strings.Join(out.Labels, ", "), from)
	})
}

// activationReason is the reason prompt.activated records.
func activationReason(id string, target int, r labreport.Recommendation) string {
	if target == r.Version {
		return fmt.Sprintf("recommended by experiment %s with confidence %s", id, r.Confidence)
	}
	return fmt.Sprintf("chosen from experiment %s over its recommended version %d (confidence %s)", id, r.Version, r.Confidence)
}
