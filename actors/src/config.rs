//! Runtime configuration: the runtime's part of the process's settings.
//!
//! [`Config`], [`Durability`] and [`Completion`] live with the settings'
//! parser in `taskfold_core::settings` (pure, tested without an
//! environment); every `TASKFOLD_*` variable is read there, once, by
//! `Settings::from_env` (see the book's Configuration chapter).

pub use taskfold_core::settings::{
    CheckpointConfig, Completion, Config, Durability, LogLevel, RespawnConfig, Restart, Settings,
    SettingsError, Standby,
};
