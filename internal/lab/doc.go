// Package lab is agentq's lab consumer: it runs prompt experiments whose
// recommendations can be trusted.
//
// An experiment.requested names a prompt, its baseline version (default:
// the version labelled production, else the latest) and candidate
// versions, test queries and repetitions. The lab checks it against its
// limits (AGENTQ_LAB_*) and either refuses it with lab.rejected and a
// reason a person understands (no model configured, over a limit, unknown
// prompt or version, an assertion it cannot use) or accepts it: in one
// transaction its inbox claim, a job (internal/job), the experiment's row
// and experiment.started in the outbox. At most AGENTQ_LAB_MAX_RUNNING
// experiments of a tenant run at once, across every copy; the others wait
// in order.
//
// A job worker in any copy runs the experiment: every version × query ×
// repetition is a trial against the configured model (the version rendered
// as the system message, the query as the user message), a real and
// independent call, run AGENTQ_LAB_CONCURRENCY at a time, and evaluated
// through three tiers, fail-fast: structural (text, JSON, JSON matching a
// schema; a built-in agent-response shape by default), rules (four built-in rules and
// promptfoo-named assertions) and an LLM judge (internal/chat's rubric
// prompt) under a token budget per experiment. Each trial is stored the
// moment it finishes, as a step of the job, so an attempt after a crash,
// a stop or a takeover by another copy runs only the trials no attempt
// stored, and experiment.cancelled stops a queued or running experiment
// within seconds.
//
// When the job ends, the report (internal/report: per-version aggregates,
// per-query pass rates, Wilson intervals, paired tests with Holm's
// correction, a recommendation whose confidence is honest about noise) is
// built from the stored trials and published in experiment.completed, or,
// after a timeout, a cancellation or a failure, in experiment.failed with
// the report of the trials done.
//
// A run from feedback (a request with auto, or a slot of the cron schedule
// AGENTQ_LAB_SCHEDULE) writes its own candidates. When it is accepted, the
// prompt's negative feedback up to the request's time is read from the
// lab's read model of feedback.submitted and prompt.used (too little is
// refused); its distinct queries become the test queries, a share of them
// held out. The job's first steps then classify the weaknesses the shown
// feedback reveals (internal/chat's analysis prompt), write one candidate
// per improvement strategy, publish them as prompt.created through the
// outbox under ids derived from the experiment, and wait for the indexer's
// prompt.indexed; each step is stored, so a resumed attempt calls the
// model only for what no attempt stored and publishes the same events.
// The report adds the results on the held-out and the shown queries apart.
// A schedule slot's request has ids derived from the slot and the prompt,
// so every copy publishes the same one and it runs once.
//
// Prompt versions come from the lab's own read model, kept from
// prompt.created (the content, the response schema and tools of its
// metadata) and the indexer's results, prompt.indexed and indexer.rejected
// (the version it became, or none, and its labels, at its stream
// sequence; the newest result of a create is what it did). The feedback
// read model's events (feedback.submitted, prompt.used) are applied a
// batch at a time. Replay never re-runs an experiment: a request the
// lab accepted before finds its job and does nothing, and a rebuild
// (RebuildTarget) restores the read model only, keeping the experiments
// and the commands the lab decided.
//
// Serve answers experiments.get, experiments.list and experiments.trials
// over NATS request/reply, so `agentq experiment status|list|trials|report`
// read the lab's state through the lab.
package lab
