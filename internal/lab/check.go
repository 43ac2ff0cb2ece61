package lab

// CheckAssertions reports whether the lab can use as, with prices for cost
// assertions: the error names the first assertion it cannot use (where
// says whose they are, e.g. "test 3"), as lab.rejected would. Importers
// call it before they publish anything.
func CheckAssertions(as []Assertion, prices *Prices, where string) error {
	_, err := compileAssertions(as, prices, where)
	return err
}
