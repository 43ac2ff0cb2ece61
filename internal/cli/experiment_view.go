package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentq/agentq/internal/config"
	"github.com/agentq/agentq/internal/lab"
	labreport "github.com/agentq/agentq/internal/report"
)

// This file reads the lab's state for agentq experiment status, list,
// trials and report, through its request/reply service (experiments.get,
// .list and .trials).

// getExperiment asks the lab for experiment id.
func getExperiment(ctx context.Context, e Env, cfg config.Config, tenant, id string) (lab.Experiment, error) {
	var reply struct {
		Experiment lab.Experiment `json:"experiment"`
	}
	err := call(ctx, e, cfg, lab.GetSubject+"."+tenant, requestTimeout, lab.GetRequest{ID: id}, &reply)
	return reply.Experiment, err
}

// idCommand parses the flags and the one ID of a command.
func idCommand(e Env, name string, args []string, define func(fs *flag.FlagSet)) (tenant, id string, err error) {
	fs := flags(name, e)
	t := tenantFlag(fs, e)
	if define != nil {
		define(fs)
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return "", "", err
	}
	if len(pos) != 1 {
		return "", "", usageError(e, fs, name, "one experiment ID is required, got %d arguments", len(pos))
	}
	if err := checkTenant(e, fs, name, *t); err != nil {
		return "", "", err
	}
	return *t, pos[0], nil
}

func runExperimentStatus(ctx context.Context, e Env, cfg config.Config, args []string) error {
	var asJSON *bool
	tenant, id, err := idCommand(e, "experiment status", args, func(fs *flag.FlagSet) {
		asJSON = fs.Bool("json", false, "print the experiment as JSON (without its report)")
	})
	if err != nil {
		return err
	}
	x, err := getExperiment(ctx, e, cfg, tenant, id)
	if err != nil {
		return err
	}
	if *asJSON {
		x.Report, x.Judge, x.Summary, x.Partial = nil, nil, "", false
		return writeJSON(e.Stdout, x)
	}
	printStatus(e.Stdout, x)
	return nil
}

func printStatus(w io.Writer, x lab.Experiment) {
	pct := 0
	if x.TotalTrials > 0 {
		pct = 100 * x.CompletedTrials / x.TotalTrials
	}
	status := x.Status
	if x.CancelRequested && x.FinishedAt == nil {
		status += " (cancelling)"
	}
	fmt.Fprintf(w, "experiment %s: %s, %d of %d trials (%d%%)\n", x.ID, status, x.CompletedTrials, x.TotalTrials, pct)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "  %s\t%s\n", k, v)
		}
	}
	row("name", x.Name)
	row("prompt", fmt.Sprintf("%s: version %d against %s", x.PromptID, x.BaselineVersion, versionList(x.CandidateVersions)))
	row("model", x.Model+", judge "+x.JudgeModel)
	row("created", x.CreatedAt.UTC().Format(time.RFC3339))
	if x.StartedAt != nil {
		row("started", x.StartedAt.UTC().Format(time.RFC3339))
	}
	if x.FinishedAt != nil {
		took := ""
		if x.StartedAt != nil {
			took = fmt.Sprintf(" (ran %s)", x.FinishedAt.Sub(*x.StartedAt).Round(100*time.Millisecond))
		}
		row("finished", x.FinishedAt.UTC().Format(time.RFC3339)+took)
	}
	if x.ReasonCode != "" {
		row("reason", x.ReasonCode+": "+oneLineText(x.Reason))
	}
	if r := x.Recommendation; r != nil {
		so := ""
		if x.Partial {
			so = " (so far: the trials stored)"
		}
		row("recommends", fmt.Sprintf("version %d, confidence %s%s", r.Version, r.Confidence, so))
	}
	_ = tw.Flush()
}

func runExperimentList(ctx context.Context, e Env, cfg config.Config, args []string) error {
	const name = "experiment list"
	fs := flags(name, e)
	tenant := tenantFlag(fs, e)
	status := fs.String("status", "", "only experiments in this status: queued, running, completed, failed or cancelled")
	prompt := fs.String("prompt", "", "only experiments of this prompt")
	limit := fs.Int("limit", 50, "at most this many (1 to 200)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usageError(e, fs, name, "no arguments, got %d", len(pos))
	}
	if err := checkTenant(e, fs, name, *tenant); err != nil {
		return err
	}
	var reply struct {
		Experiments []lab.Experiment `json:"experiments"`
	}
	if err := call(ctx, e, cfg, lab.ListSubject+"."+*tenant, requestTimeout,
		lab.ListRequest{Status: *status, PromptID: *prompt, Limit: *limit}, &reply); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, reply)
	}
	if len(reply.Experiments) == 0 {
		fmt.Fprintf(e.Stdout, "no experiments for tenant %s\n", *tenant)
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROMPT\tSTATUS\tVERSIONS\tTRIALS\tRECOMMENDS\tCREATED")
	for _, x := range reply.Experiments {
		rec := "-"
		if r := x.Recommendation; r != nil {
			rec = fmt.Sprintf("%d (%s)", r.Version, r.Confidence)
		}
		versions := strconv.Itoa(x.BaselineVersion)
		if len(x.CandidateVersions) > 0 {
			versions += " vs " + strings.Trim(strings.Join(strings.Fields(fmt.Sprint(x.CandidateVersions)), ","), "[]")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", x.ID, x.PromptID, x.Status, versions, x.CompletedTrials, x.TotalTrials,
			rec, x.CreatedAt.UTC().Format("2006-01-02 15:04:05"))
	}
	return tw.Flush()
}

func runExperimentTrials(ctx context.Context, e Env, cfg config.Config, args []string) error {
	var version, query, limit, offset *int
	var failed, full, asJSON *bool
	tenant, id, err := idCommand(e, "experiment trials", args, func(fs *flag.FlagSet) {
		version = fs.Int("version", 0, "only this version's trials")
		query = fs.Int("query", -1, "only this test query's trials (its index, from 0)")
		failed = fs.Bool("failed", false, "only the trials that did not pass")
		limit = fs.Int("limit", 100, "at most this many (1 to 1000)")
		offset = fs.Int("offset", 0, "skip this many first")
		full = fs.Bool("full", false, "whole responses (as stored, up to 16 KiB), not their first line")
		asJSON = fs.Bool("json", false, "print JSON")
	})
	if err != nil {
		return err
	}
	req := lab.TrialsRequest{ID: id, Version: *version, Failed: *failed, Limit: *limit, Offset: *offset}
	if *query >= 0 {
		req.Query = query
	}
	if *full || *asJSON {
		req.MaxResponseBytes = lab.MaxStoredResponse
	}
	var reply lab.TrialsReply
	if err := call(ctx, e, cfg, lab.TrialsSubject+"."+tenant, requestTimeout, req, &reply); err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, reply)
	}
	if len(reply.Trials) == 0 {
		fmt.Fprintf(e.Stdout, "experiment %s: no trials match (%d stored match before --offset)\n", id, reply.Total)
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tQUERY\tREP\tRESULT\tSCORE\tTIERS\tMS\tTOKENS\tRESPONSE")
	for _, t := range reply.Trials {
		result := "pass"
		if !t.Pass {
			result = "FAIL"
		}
		text := t.Response
		if t.Error != "" {
			result, text = "ERROR", t.Error
		}
		if !*full {
			text = truncateText(oneLineText(text), 70)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%.2f\t%s\t%.0f\t%d\t%s\n", t.Version, t.Query, t.Repetition, result, t.Score,
			tierMarks(t.Tiers), t.DurationMs, t.PromptTokens+t.CompletionTokens, text)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if shown := reply.Trials; *offset+len(shown) < reply.Total {
		fmt.Fprintf(e.Stdout, "%d of %d shown: --offset %d for more\n", len(shown), reply.Total, *offset+len(shown))
	}
	return nil
}

// tierMarks is a trial's tiers in brief: S, R, J with ✓ or ✗.
func tierMarks(tiers []lab.TierResult) string {
	if len(tiers) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, t := range tiers {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(tierInitial(t.Tier))
		if t.Pass {
			b.WriteString("✓")
		} else {
			b.WriteString("✗")
		}
	}
	return b.String()
}

func runExperimentReport(ctx context.Context, e Env, cfg config.Config, args []string) error {
	var asJSON *bool
	tenant, id, err := idCommand(e, "experiment report", args, func(fs *flag.FlagSet) {
		asJSON = fs.Bool("json", false, "print the experiment with its report, judge spend and summary as JSON")
	})
	if err != nil {
		return err
	}
	x, err := getExperiment(ctx, e, cfg, tenant, id)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.Stdout, x)
	}
	return printReport(e.Stdout, x)
}

// printReport prints an experiment's report as tables.
func printReport(w io.Writer, x lab.Experiment) error {
	printStatus(w, x)
	if len(x.Report) == 0 {
		fmt.Fprintln(w, "\nno report yet: no trial is stored")
		return nil
	}
	var rep labreport.Report
	if err := json.Unmarshal(x.Report, &rep); err != nil {
		return fmt.Errorf("decode the report: %w", err)
	}
	if x.Partial {
		fmt.Fprintln(w, "\nthe experiment has not ended: this report covers the trials stored so far")
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VERSION\tTRIALS\tPASS RATE\t95% CI\tSCORE\tWEIGHTED\tAVG MS\tTOKENS\tERRORS\tTIERS (pass rate)\tTOOL CALLS")
	for _, v := range rep.Versions {
		name := strconv.Itoa(v.Version)
		if v.Baseline {
			name += " (baseline)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s–%s\t%.2f\t%.2f\t%.0f\t%d\t%s\t%s\t%s\n", name, v.Trials, percent(v.PassRate),
			percent(v.PassRateCI.Low), percent(v.PassRateCI.High), v.AvgScore, v.WeightedScore, v.AvgDurationMs, v.TotalTokens,
			percent(v.ErrorRate), tierRates(v.TierBreakdown), toolCounts(v.ToolUsage))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rep.Comparisons) > 0 {
		fmt.Fprintf(w, "\nagainst the baseline, query by query (%d queries; p-values Holm-corrected):\n", rep.Queries)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "CANDIDATE\tΔ PASS RATE\tΔ SCORE\tBETTER/WORSE/TIED\tPASS p\tSCORE p\tSIGNIFICANT\tQUERIES NEEDED")
		for _, c := range rep.Comparisons {
			needed := "-"
			if c.QueriesNeeded != nil {
				needed = strconv.Itoa(*c.QueriesNeeded)
			}
			sig := "no"
			switch {
			case c.Significant:
				sig = "yes, better"
			case c.SignificantlyWorse:
				sig = "yes, worse"
			}
			fmt.Fprintf(tw, "%d\t%+.0f pt\t%+.2f\t%d/%d/%d\t%.3g\t%.3g\t%s\t%s\n", c.Version, 100*c.PassRateDiff, c.AvgScoreDiff,
				c.PassTest.Better, c.PassTest.Worse, c.PassTest.Ties, c.PassTest.PHolm, c.ScoreTest.PHolm, sig, needed)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	r := rep.Recommendation
	fmt.Fprintf(w, "\nrecommendation: version %d, confidence %s\n", r.Version, r.Confidence)
	if r.Reason != "" {
		fmt.Fprintf(w, "  %s\n", oneLineText(r.Reason))
	}
	list := func(title string, items []string) {
		if len(items) == 0 {
			return
		}
		fmt.Fprintf(w, "%s:\n", title)
		for _, it := range items {
			fmt.Fprintf(w, "  - %s\n", oneLineText(it))
		}
	}
	list("improvements", r.Improvements)
	list("warnings", r.Warnings)
	var failing []string
	for _, v := range rep.Versions {
		for _, q := range v.FailingQueries {
			text := ""
			if q < len(x.Queries) {
				text = " " + strconv.Quote(truncateText(x.Queries[q], 60))
			}
			failing = append(failing, fmt.Sprintf("version %d, query %d%s", v.Version, q, text))
		}
	}
	list("queries that failed every time", failing)
	if len(x.Judge) > 0 {
		var j lab.JudgeSpend
		if err := json.Unmarshal(x.Judge, &j); err == nil {
			fmt.Fprintf(w, "judge: %s, %d of %d tokens spent, %d trials skipped (budget), %d not judged (errors)\n",
				j.Model, j.SpentTokens, j.BudgetTokens, j.Skipped, j.Failed)
		}
	}
	if x.Summary != "" {
		fmt.Fprintf(w, "\nsummary (by the model):\n  %s\n", oneLineText(x.Summary))
	}
	return nil
}

// tierInitial names a tier in a table: S(tructural), R(ules), J(udge).
func tierInitial(t labreport.Tier) string {
	switch t {
	case labreport.TierStructural:
		return "S"
	case labreport.TierRules:
		return "R"
	case labreport.TierJudge:
		return "J"
	}
	return string(t)
}

func percent(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

func tierRates(m map[labreport.Tier]float64) string {
	var parts []string
	for _, t := range []labreport.Tier{labreport.TierStructural, labreport.TierRules, labreport.TierJudge} {
		if v, ok := m[t]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", tierInitial(t), percent(v)))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func toolCounts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, name := range sortedNames(m) {
		parts = append(parts, fmt.Sprintf("%s×%d", name, m[name]))
	}
	return strings.Join(parts, " ")
}

func sortedNames(m map[string]int) []string {
	return slices.Sorted(maps.Keys(m))
}
