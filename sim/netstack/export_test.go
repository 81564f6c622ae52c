package netstack

// IdleChecks counts idleCheck calls, for tests of the driver.
var IdleChecks = &idleChecks

func SetIdleHook(f func()) { idleHook = f }
