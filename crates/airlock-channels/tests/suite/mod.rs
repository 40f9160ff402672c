mod discord;
mod slack;
mod telegram;
