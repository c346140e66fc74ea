//! CRI driver.
