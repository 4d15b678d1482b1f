package agrl

import "fmt"

// Curriculum metrics, logged per step when GRPO.Curriculum is on (D is easy, medium or hard):
// the weight the step's tasks were drawn with, and how many of the step's groups of that
// difficulty were sampled and carried signal (rewards not all equal; every rollout round).
func MetricCurriculumWeight(d Difficulty) string { return "curriculum/weight_" + d.String() }

// MetricCurriculumGroups is the number of groups of difficulty d sampled at a step.
func MetricCurriculumGroups(d Difficulty) string { return "curriculum/groups_" + d.String() }

// MetricCurriculumSignal is the number of those groups whose rewards were not all equal.
func MetricCurriculumSignal(d Difficulty) string { return "curriculum/signal_" + d.String() }

// CurriculumFloor is the least share of its base weight a difficulty keeps, however rarely
// its groups carry signal, so that a saturated difficulty is still seen (and a drop noticed).
const CurriculumFloor = 0.1

// CurriculumWeights returns the task mix's weights for the next GRPO step: each difficulty's
// base weight times the estimated share of its groups that carry signal, (signal+1)/(groups+2)
// (a difficulty without recent groups counts as 1/2), floored at CurriculumFloor, normalised to
// sum to 1. Difficulties of base weight 0 stay at 0. As easy tasks saturate (every sample of a
// group right) their share falls and the hard tasks, whose groups still disagree, get the
// steps. It is an error for the base weights to be negative or all 0, or for a count to be
// negative or signal to exceed groups.
func CurriculumWeights(base map[Difficulty]float64, groups, signal map[Difficulty]int) (map[Difficulty]float64, error) {
	out := map[Difficulty]float64{}
	sum := 0.0
	for _, d := range []Difficulty{Easy, Medium, Hard} {
		b := base[d]
		g, s := groups[d], signal[d]
		if b < 0 || g < 0 || s < 0 || s > g {
			return nil, fmt.Errorf("agrl: curriculum for %s: base %v, %d groups, %d with signal", d, b, g, s)
		}
		if b == 0 {
			continue
		}
		q := max((float64(s)+1)/(float64(g)+2), CurriculumFloor)
		out[d] = b * q
		sum += out[d]
	}
	if sum == 0 {
		return nil, fmt.Errorf("agrl: curriculum: the base mix has no weight")
	}
	for d := range out {
		out[d] /= sum
	}
	return out, nil
}

// Plateaued reports whether a series of evaluations (dev success, oldest first) has stopped
// improving: it holds more than patience values and none of the last patience values exceeds
// the best of those before them. With patience 0 it is never true.
func Plateaued(values []float64, patience int) bool {
	if patience <= 0 || len(values) <= patience {
		return false
	}
	cut := len(values) - patience
	best := values[0]
	for _, v := range values[:cut] {
		best = max(best, v)
	}
	for _, v := range values[cut:] {
		if v > best {
			return false
		}
	}
	return true
}
