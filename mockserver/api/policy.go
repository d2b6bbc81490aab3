package api

import (
	"github.com/sglmock/sglmock/mockserver/profile"
)

// routingKeyHeader carries an OpenAI request's routing key for the
// routing-key schedule policy (serving_base.py's extract_routing_key).
const routingKeyHeader = "x-smg-routing-key"

// openAIHeaders reads what an OpenAI route takes from the headers: the
// routing key and X-Data-Parallel-Rank (headerRank). It reports false,
// having answered, when a header is refused.
func openAIHeaders(c *exchange, b *openAICommon) bool {
	b.routingKey = c.GetHeader(routingKeyHeader)
	return headerRank(c, b)
}

// fillPriorityArgs reports the priority scheduling flags in /server_info,
// as SGLang's server args name them.
func fillPriorityArgs(a *ServerArgs, p *profile.Profile) {
	a.EnablePriorityScheduling = p.EnablePriorityScheduling
	a.DisablePriorityPreemption = p.DisablePriorityPreemption
	a.DefaultPriorityValue = p.DefaultPriorityValue
	a.AbortOnPriorityWhenDisabled = p.AbortOnPriorityWhenDisabled
	a.ScheduleLowPriorityValuesFirst = p.ScheduleLowPriorityValuesFirst
	a.PriorityPreemptionThreshold = p.PreemptionThreshold()
}
