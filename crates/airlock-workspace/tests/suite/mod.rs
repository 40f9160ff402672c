mod commit;
mod crash;
mod entries;
mod fixture;
mod names;
mod staging;
mod summary_flags;
mod undo;
