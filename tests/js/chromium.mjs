// Debian's Chromium, headless, as the chat page drivers (chat_page.mjs, chat_review_page.mjs)
// open it: a persistent context is how Playwright takes the fresh profile directory
// (--user-data-dir); the background-networking flags keep it from calling out (this machine's
// network is closed, and every refused connection is noise in the test's output).
import { chromium } from "playwright-core";

export function launch(userDataDir) {
  return chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    viewport: { width: 1200, height: 900 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

// Opens the chat page in a new tab, recording its errors in ``problems``, and asks ``question``;
// the tab, for the driver to wait on.
export async function ask(browser, pageUrl, question, problems) {
  const page = await browser.newPage();
  page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error") problems.push(`console error: ${message.text()}`);
  });
  await page.goto(pageUrl);
  await page.fill("textarea[name=question]", question);
  await page.click("button[name=go]");
  return page;
}

// What the chat page shows at the end of a run (evaluated in the page: self-contained).
export function readChat() {
  return {
    status: document.querySelector("#status").dataset.state,
    statusText: document.querySelector("#status").textContent,
    events: [...document.querySelectorAll("#timeline .event")].map((item) => ({
      type: item.dataset.type,
      text: item.innerText,
    })),
    memory: document.querySelector("#memory").textContent,
    answer: document.querySelector("#answer").textContent,
    answerChunks: Number(document.querySelector("#answer").dataset.chunks || 0),
  };
}
