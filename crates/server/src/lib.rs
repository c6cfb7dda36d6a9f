//! LABIOS server (article 3.3.3): workers and the worker manager.
