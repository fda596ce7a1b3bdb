// Drives examples/chat in Debian's Chromium for tests/test_chat_example.py's issue-42 cases:
//   resolve  the run pauses for a note review; "Mark as resolved" (Agent Chat UI's: command
//            goto "__end__") ends the thread;
//   refusal  the question is over the server's cap: the page shows the server's reason (read
//            from a cross-origin 422, which needs the refusal's CORS headers);
//   reload   the page is reloaded mid-run; the reloaded page joins the run (asked for as
//            resumable) and shows its answer. The driver prints {"reloaded": true} once the page
//            is back, and the test releases the held model then.
// Prints what the DOM shows as JSON (its last line).
//
//   node chat_client_page.mjs <page URL> <question> <user data dir> <resolve|refusal|reload>
import { ask, launch, readChat } from "./chromium.mjs";

const [pageUrl, question, userDataDir, mode] = process.argv.slice(2);
if (!pageUrl || !question || !userDataDir || !["resolve", "refusal", "reload"].includes(mode)) {
  console.error("usage: node chat_client_page.mjs <page URL> <question> <user data dir> <resolve|refusal|reload>");
  process.exit(2);
}
const TIMEOUT = Number(process.env.CHAT_PAGE_TIMEOUT_MS || 600000);
const ended = "#status[data-state=done], #status[data-state=error], #status[data-state=resolved]";

const browser = await launch(userDataDir);
const problems = [];
try {
  const page = await ask(browser, pageUrl, question, problems);
  if (mode === "resolve") {
    await page.waitForSelector(`#status[data-state=review], ${ended}`, { timeout: TIMEOUT });
    if (await page.$("#status[data-state=review]")) await page.click("#review-resolve");
  } else if (mode === "reload") {
    await page.waitForSelector(`#timeline .event, ${ended}`, { timeout: TIMEOUT });
    await page.reload();
    await page.waitForSelector("#status[data-state=running]", { timeout: TIMEOUT });
    console.log(JSON.stringify({ reloaded: true }));
  }
  await page.waitForSelector(ended, { timeout: TIMEOUT });
  const dom = await page.evaluate(readChat);
  // a page error the refusal is meant to cause is no problem of the page
  console.log(JSON.stringify({ ...dom, problems: problems.filter((p) => !p.includes("422")) }));
} finally {
  await browser.close();
}
