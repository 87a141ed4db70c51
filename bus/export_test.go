package bus

// IsPerSubjectLimit is isPerSubjectLimit, for the tests of bus_test.
var IsPerSubjectLimit = isPerSubjectLimit
