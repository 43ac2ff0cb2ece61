package config

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/robfig/cron/v3"
)

// labCron reads cron expressions of 5 fields, 6 with seconds first, and
// the @yearly ... @hourly descriptors.
var labCron = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// LabSchedule parses AGENTQ_LAB_SCHEDULE. Times are UTC unless the
// expression starts with CRON_TZ= (or TZ=): every lab copy must compute
// the same slots whatever its local zone, since a slot names the run it
// starts. @every is refused for the same reason: its times count from
// when each copy started.
func LabSchedule(spec string) (cron.Schedule, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, errors.New("empty cron expression")
	}
	if strings.Contains(spec, "@every") {
		return nil, fmt.Errorf("%q: @every is not supported (each copy would count from its own start): use a cron expression", spec)
	}
	if !strings.HasPrefix(spec, "CRON_TZ=") && !strings.HasPrefix(spec, "TZ=") {
		spec = "CRON_TZ=UTC " + spec
	}
	return labCron.Parse(spec)
}

// LabSchedulePrompts splits AGENTQ_LAB_SCHEDULE_PROMPTS into prompt ids;
// none means every prompt.
func LabSchedulePrompts(list string) []string {
	var out []string
	for _, id := range strings.Split(list, ",") {
		if id = strings.TrimSpace(id); id != "" {
			out = append(out, id)
		}
	}
	return out
}

// promptIDRE is the shape of a prompt id in the schemas.
var promptIDRE = regexp.MustCompile(`^[A-Za-z0-9_.:/-]{1,128}$`)
