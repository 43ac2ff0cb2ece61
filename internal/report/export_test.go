package report

// WilsonForTest is the 95 % Wilson interval at p over n trials.
func WilsonForTest(p, n float64) Interval { return wilson(p, n, z95) }
